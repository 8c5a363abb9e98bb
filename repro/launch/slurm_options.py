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
        for name in ("gpus_per_node", "cpus_per_task"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ReproError(f"{where}: {name} must be a positive integer, got {value!r}")
