"""What a launcher needs to start one cell anywhere: its run folder, the config that folder records, and
the command the job runs. Every launcher (local, Slurm, Ray) starts cells from this, so a cell's job does
the same thing whichever scheduler runs it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro import catalog
from repro.cell_config import VerlRun, parse_sets, resolve_cpu_config, verl_run, verl_size_sets
from repro.errors import ReproError
from repro.launch.attempt import PLACEHOLDER
from repro.loggers import ALWAYS, as_option
from repro.rundir import cell_name
from repro.sweep import Cell, Sweep


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


@dataclass(frozen=True)
class CellPlan:
    cell: Cell
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


def cpu_argv(cell: Cell, sweep: Sweep, runs_root: Path, options: CpuOptions, python: str) -> list[str]:
    """`repro run` for one CPU cell, in module form so no console script is needed."""
    return [
        python,
        "-m",
        "repro.cli",
        "run",
        "--model",
        cell.backbone,
        "--method",
        cell.method,
        "--prompt-set",
        cell.prompt_set,
        "--seed",
        str(cell.seed),
        "--runs-root",
        str(runs_root),
        *(["--engine", "verl"] if sweep.engine == "verl" else []),
        *_set_args(sweep.overrides),
        *(["--logger", as_option(sweep.loggers)] if sweep.loggers != ALWAYS else []),
        *options.args(),
    ]


def attempt_argv(run_dir: Path, trainer: Sequence[str], python: str) -> list[str]:
    return [python, "-m", "repro.launch.attempt", str(run_dir), "--", *trainer]


def plan_cell(
    cell: Cell, sweep: Sweep, runs_root: str | Path, options: CpuOptions | None = None, python: str = "python"
) -> CellPlan:
    """The plan of one cell. CPU configs resolve this machine's model and data folders, so plan CPU cells
    on a machine that shares $REPRO_HOME with the one that runs them (a cluster's shared filesystem)."""
    options = options or CpuOptions()
    root = Path(runs_root).absolute()
    name = cell_name(cell.backbone, cell.method, cell.prompt_set, cell.seed)
    run_dir = root / name
    if catalog.get_backbone(cell.backbone).device == "cpu":
        argv = cpu_argv(cell, sweep, root, options, python)
        sets = parse_sets([a for prev, a in itertools.pairwise(argv) if prev == "--set"])
        if sweep.engine == "verl":  # the job's `repro run --engine verl` records the same verl config
            sets.update(options.verl_sets())
            spec = verl_run(
                cell.backbone, cell.method, cell.prompt_set, cell.seed, run_dir, sets=sets, loggers=sweep.loggers
            )
            return CellPlan(cell, name, run_dir, spec.config, argv, None)
        config, _note = resolve_cpu_config(
            cell.backbone, cell.method, cell.prompt_set, cell.seed, options.steps, options.batch, sets
        )
        return CellPlan(cell, name, run_dir, config.to_dict(), argv, None)
    spec = verl_run(
        cell.backbone,
        cell.method,
        cell.prompt_set,
        cell.seed,
        run_dir,
        preset=sweep.preset,
        sets=sweep.overrides,
        loggers=sweep.loggers,
    )
    return CellPlan(cell, name, run_dir, spec.config, attempt_argv(run_dir, spec.trainer_argv(), python), spec)


def verify_gpu_plans(plans: Sequence[CellPlan], sweep: Sweep, python: str | None = None) -> dict[str, Any]:
    """Every GPU cell of a sweep through `repro run`'s own checks (composition, typed `overrides:`, vLLM's
    admission rules) before one is submitted: a typo in the sweep file is one line naming the cell here, not 28
    jobs failing on their nodes. Returns each GPU cell's preflight by name, whose stack check (of the
    interpreter `python` the jobs will use) a submission requires and a dry run shows."""
    from repro.verl_plugin.preflight import verify_cell

    reports: dict[str, Any] = {}
    for plan in plans:
        if plan.gpu is None:
            continue
        c = plan.cell
        try:
            _cfg, reports[plan.name] = verify_cell(
                plan.gpu,
                model=c.backbone,
                method=c.method,
                prompt_set=c.prompt_set,
                sets=sweep.overrides,
                python=python,
            )
        except ReproError as exc:
            raise ReproError(f"{plan.name}: {exc}") from None
    return reports


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
    "attempt_argv",
    "cpu_argv",
    "plan_cell",
    "require_stack",
    "stack_report",
    "verify_gpu_plans",
]
