"""What a launcher needs to start one cell anywhere: its run folder, the config that folder records, and
the command the job runs. Every launcher (local, Slurm, Ray) starts cells from this, so a cell's job does
the same thing whichever scheduler runs it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.cell import ResolvedCell
from repro.errors import ReproError
from repro.launch.attempt import PLACEHOLDER
from repro.loggers import ALWAYS, as_option
from repro.sweep import Sweep


def verl_size_sets(steps: int | None, batch: int | None) -> dict[str, int]:
    """`--steps` and `--batch` as the verl keys they set on a verl-engine cell."""
    out = {}
    if steps is not None:
        out["trainer.total_training_steps"] = steps
    if batch is not None:
        out["data.train_batch_size"] = batch
    return out


@dataclass(frozen=True)
class CpuOptions:
    """Per-sweep CPU knobs that the command line may set (`repro sweep run --steps/--batch`)."""

    steps: int | None = None
    batch: int | None = None

    def verl_sets(self) -> dict[str, Any]:
        """The same knobs as verl keys, as `repro run --engine verl` maps --steps and --batch."""
        return verl_size_sets(self.steps, self.batch)

    def args(self) -> list[str]:
        out: list[str] = []
        if self.steps is not None:
            out += ["--steps", str(self.steps)]
        if self.batch is not None:
            out += ["--batch", str(self.batch)]
        return out


@dataclass
class VerlRun:
    """A verl cell as its run folder records it: the config for RunDir.prepare and the trainer command
    (metrics file still ``attempt-NNN.jsonl``; `repro.launch.attempt` numbers it). Built by
    `repro.cell_config.verl_run`; the launchers read it and import nothing of verl's."""

    config: dict[str, Any]
    overrides: list[str]
    nnodes: int
    gpus_per_node: int
    data_files: tuple[Path, Path]  # train, validation
    hub_sources: dict[str, str] = field(default_factory=dict)  # local file -> the Hub id it is built from
    entry_module: str = ""  # the module whose main runs verl's trainer with these overrides
    node_check: list[str] = field(default_factory=list)  # the job's stack check on each node (repro.node_check)

    def trainer_argv(self, python: str = "python") -> list[str]:
        return [python, "-m", self.entry_module, *self.overrides]


@dataclass(frozen=True)
class CellPlan:
    cell: ResolvedCell
    name: str
    run_dir: Path
    config: dict[str, Any]  # what RunDir.prepare records; the job's own `repro run` / attempt finds the same
    argv: list[str]  # the job's command; argv[0] is the Python interpreter
    gpu: VerlRun | None  # None for CPU backbones

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None


def _set_args(overrides: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in overrides.items():
        out += ["--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return out


def cpu_argv(cell: ResolvedCell, sweep: Sweep, runs_root: Path, options: CpuOptions, python: str) -> list[str]:
    """`repro run` for one CPU cell, in module form so no console script is needed."""
    return [
        python,
        "-m",
        "repro.cli",
        "run",
        "--model",
        cell.backbone.key,
        "--method",
        cell.method.key,
        "--prompt-set",
        cell.prompt_set.key,
        "--seed",
        str(cell.seed),
        "--runs-root",
        str(runs_root),
        *(["--engine", "verl"] if sweep.engine == "verl" else []),
        *_set_args(sweep.overrides),
        *(["--logger", as_option(sweep.loggers)] if sweep.loggers != ALWAYS else []),
        *options.args(),
        # a compute-matched long run: its own budget and step cap, after (so over) the sweep's --steps
        *(cell.extension.args(runs_root / cell.reference_name) if cell.extension is not None else []),
    ]


def attempt_argv(run_dir: Path, trainer: Sequence[str], python: str) -> list[str]:
    return [python, "-m", "repro.launch.attempt", str(run_dir), "--", *trainer]


def stack_report(reports: dict[str, Any]) -> list[str]:
    """The sweep's stack check in one block: a check whose line is the same for every GPU cell once, one that
    differs (the disk, per backbone; the attention, per override) once per distinct line with its cells."""
    if not reports:
        return []
    first = next(iter(reports.values()))
    out = [f"stack check of the environment the jobs will use ({first.python}); each job repeats it on its node:"]
    lines: dict[str, dict[str, list[str]]] = {}  # check name -> line -> cells
    for name, report in reports.items():
        for check in report.stack:
            lines.setdefault(check.name, {}).setdefault(check.line(), []).append(name)
    for by_line in lines.values():
        for line, names in by_line.items():
            shown = ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
            out.append(f"  {line}" + ("" if len(names) == len(reports) else f"  [{shown}]"))
    bad = sum(1 for report in reports.values() if any(c.verdict == "fail" for c in report.stack))
    if bad:
        out.append(f"stack check failed for {bad} of {len(reports)} GPU cells: a submission stops here until it passes")
    return out


def require_stack(reports: dict[str, Any]) -> None:
    """Stop a submission whose stack check failed for any cell: one line naming the cell and the first fix."""
    for name, report in reports.items():
        try:
            report.require_stack()
        except ReproError as exc:
            raise ReproError(f"{name}: {exc}") from None


__all__ = [
    "PLACEHOLDER",
    "CellPlan",
    "CpuOptions",
    "VerlRun",
    "attempt_argv",
    "cpu_argv",
    "require_stack",
    "stack_report",
]
