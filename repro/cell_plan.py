"""Each cell of a sweep as a launcher starts it (`repro.launch.plan.CellPlan`): the config its run folder
records and the command its job runs, built from the resolved cell by the same functions `repro run` uses,
and every GPU cell checked as `repro run` checks it, before one job is submitted. It sits above the
launchers: they take the plans and import nothing of the cell configs or the verl plugin."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from repro.cell import ResolvedCell
from repro.cell_config import parse_sets, resolve_cpu_config, verl_run
from repro.errors import ReproError
from repro.launch.plan import CellPlan, CpuOptions, attempt_argv, cpu_argv
from repro.sweep import Sweep


def plan_cell(
    cell: ResolvedCell, sweep: Sweep, runs_root: str | Path, options: CpuOptions | None = None, python: str = "python"
) -> CellPlan:
    """The plan of one cell. CPU configs resolve this machine's model and data folders, so plan CPU cells
    on a machine that shares $REPRO_HOME with the one that runs them (a cluster's shared filesystem)."""
    options = options or CpuOptions()
    root = Path(runs_root).absolute()
    name = cell.name
    run_dir = root / name
    if cell.is_cpu:
        argv = cpu_argv(cell, sweep, root, options, python)
        sets = parse_sets([a for prev, a in itertools.pairwise(argv) if prev == "--set"])
        if cell.engine == "verl":  # the job's `repro run --engine verl` records the same verl config
            sets.update(options.verl_sets())
            spec = verl_run(cell, run_dir, sets=sets, loggers=sweep.loggers)
            return CellPlan(cell, name, run_dir, spec.config, argv, None)
        steps = options.steps
        if cell.extension is not None:  # what its `repro run --extend ... --until-tokens N --steps CAP` records
            steps = cell.extension.steps
            sets["until_tokens"] = cell.extension.until_tokens
        config, _note = resolve_cpu_config(cell, steps, options.batch, sets)
        return CellPlan(cell, name, run_dir, config.to_dict(), argv, None)
    spec = verl_run(cell, run_dir, sets=sweep.overrides, loggers=sweep.loggers)
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
        try:
            _cfg, reports[plan.name] = verify_cell(plan.gpu, plan.cell, sets=sweep.overrides, python=python)
        except ReproError as exc:
            raise ReproError(f"{plan.name}: {exc}") from None
    return reports
