"""sbatch options (`SlurmOptions`): parsed from a sweep file's `slurm:` mapping and `repro sweep run` flags.

Kept out of the launcher (`repro.launch.slurm`) and importing nothing of `repro.launch`, so that
`repro.sweep` can check a sweep file's options without depending on the launchers, which build on sweeps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from repro.errors import ReproError

_TIME_RE = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$|^\d+$")
MAX_SIGNAL_MARGIN = 65535  # sbatch --signal's limit, in seconds


def time_seconds(time: str) -> int:
    """A Slurm time limit in seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (sbatch's formats)."""
    days, _, rest = time.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # after a day count the first field is hours
        parts += [0] * (3 - len(parts))
        hours, minutes, seconds = parts
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return parts[0] * 60


@dataclass(frozen=True)
class SlurmOptions:
    """sbatch options; from `repro sweep run` flags, else the sweep file's `slurm:` mapping, else these."""

    account: str | None = None
    partition: str | None = None
    time: str = "3-00:00:00"  # a paper cell: ~600 steps at 50-220 s/step on 8xH100 (Table 2)
    gpus_per_node: int | None = None  # default: the backbone's n_gpus_per_node (catalog)
    cpus_per_task: int | None = None  # default: 8 per GPU for GPU cells, 2 for CPU cells
    mem: str | None = None  # e.g. "0" (all of the node) or "200G"; default: the cluster's
    extra: tuple[str, ...] = field(default_factory=tuple)  # further "#SBATCH" options, e.g. "--qos=high"
    # Continuing across allocations (repro.launch.slurm): Slurm warns the job script this many seconds before
    # --time runs out (--signal=B:USR1@<margin>), the trainer stops at the end of its step with that step
    # checkpointed, and the script requeues the job. The margin must cover the step in flight plus a save:
    # default 900 s for GPU cells (a paper step is 50-290 s, a 7B save with optimizer states minutes), 60 s for
    # CPU cells (a step and its save take about a second); Slurm may warn up to 60 s earlier still.
    signal_margin: int | None = None
    max_allocations: int = 4  # allocations per submission in all (the first + 3 requeues): ~4 x 48 h for 600 steps

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str) -> SlurmOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ReproError(f"{where}: unknown slurm options {unknown}; valid: {sorted(known)}")
        values = dict(data)
        if "extra" in values:
            extra = values["extra"]
            if not isinstance(extra, list) or not all(isinstance(x, str) for x in extra):
                raise ReproError(f"{where}: slurm.extra must be a list of sbatch options like '--qos=high'")
            values["extra"] = tuple(extra)
        options = cls(**values)
        options.check(where)
        return options

    def merged(self, **flags: Any) -> SlurmOptions:
        """These options with every flag that was given (not None) on top."""
        given = {k: v for k, v in flags.items() if v is not None and v != ()}
        return SlurmOptions(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **given})

    def check(self, where: str = "slurm options") -> None:
        if not isinstance(self.time, str) or not _TIME_RE.match(self.time):
            raise ReproError(f"{where}: time {self.time!r} is not a Slurm time such as 3-00:00:00 or 90:00")
        for name in ("gpus_per_node", "cpus_per_task", "signal_margin", "max_allocations"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ReproError(f"{where}: {name} must be a positive integer, got {value!r}")
        if self.signal_margin is not None:
            if self.signal_margin > MAX_SIGNAL_MARGIN:
                raise ReproError(f"{where}: signal_margin {self.signal_margin} is over Slurm's {MAX_SIGNAL_MARGIN} s")
            if self.signal_margin >= time_seconds(self.time):
                raise ReproError(
                    f"{where}: signal_margin {self.signal_margin} s is not less than the time limit {self.time}; "
                    "the job would be asked to stop as it starts"
                )
