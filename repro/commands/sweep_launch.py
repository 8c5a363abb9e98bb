"""The launch path of `repro sweep run`, `eval` and `retry-failed`: the command line's options turned into
what the launchers take (local, slurm, ray, or a dry run), handed over, and the outcome printed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from repro.commands.sweep_options import _STYLE, LAUNCHERS
from repro.console import stderr_console, stdout_console
from repro.errors import ReproError
from repro.launch.local import LAUNCH_DIR
from repro.sweep_submit import LAUNCHABLE as LAUNCHABLE_DEFAULT


@dataclass
class _Launch:
    file: Path
    launcher: str
    runs_root: Path
    max_parallel: int | None
    steps: int | None
    batch: int | None
    wait: bool
    retries: int
    poll: float
    dry_run: bool
    slurm_flags: dict
    ray_flags: dict
    evaluate: bool = True
    eval_checkpoints: str | None = None
    require_flash_attn: bool = False

    @classmethod
    def from_options(cls, options: dict) -> _Launch:
        """From a command's parameters (its `**options`), so `run` and `retry-failed` share one mapping."""
        return cls(
            file=options["file"],
            launcher=options["launcher"],
            runs_root=options["runs_root"],
            max_parallel=options["max_parallel"],
            steps=options["steps"],
            batch=options["batch"],
            wait=options["wait"],
            retries=options["retries"],
            poll=options["poll"],
            dry_run=options.get("dry_run", False),
            slurm_flags={
                k: options.get(k)
                for k in (
                    "account",
                    "partition",
                    "time",
                    "gpus_per_node",
                    "cpus_per_task",
                    "mem",
                    "signal_margin",
                    "max_allocations",
                )
            },
            ray_flags={
                "address": options["ray_address"],
                "python": options["python"],
                # a time limit per Ray job (repro.launch.deadline), from the flags the Slurm options share
                **{k: options.get(k) for k in ("time", "signal_margin", "max_allocations")},
            },
            evaluate=options.get("evaluate", True),
            eval_checkpoints=options.get("eval_checkpoints"),
            require_flash_attn=options.get("require_flash_attn", False),
        )


def _scheduler(args: _Launch, sweep):
    from repro.launch.ray_jobs import DEFAULT_ADDRESS, RayScheduler
    from repro.launch.slurm import SlurmOptions, SlurmScheduler

    if args.launcher == "slurm":
        options = SlurmOptions.from_mapping(sweep.slurm, str(args.file)).merged(**args.slurm_flags)
        options.check("command line")
        return SlurmScheduler(options=options, project_dir=Path.cwd())
    from repro.launch.deadline import TimeLimit

    ray = {**sweep.ray, **{k: v for k, v in args.ray_flags.items() if v is not None}}
    limit = TimeLimit.from_values(ray, "command line")
    return RayScheduler(
        address=ray.get("address") or DEFAULT_ADDRESS, python=ray.get("python") or "python", limit=limit
    )


def _load(args: _Launch, *, need_eval: bool = False):
    """The sweep file with the command line's evaluation choices applied."""
    import dataclasses

    from repro.sweep import EvalSpec, load_sweep

    sweep = load_sweep(args.file)
    spec = sweep.eval
    if need_eval and spec is None:
        raise ReproError(f"{args.file} has no 'eval:' section; add one (e.g. eval: {{k: 32, checkpoints: all}})")
    if spec is not None and args.eval_checkpoints is not None:
        raw = args.eval_checkpoints.strip()
        ok = raw in ("final", "all") or all(part.strip().isdigit() for part in raw.split(","))
        if not ok:
            raise ReproError(f"--eval-checkpoints takes final, all or a comma list of steps, got {raw!r}")
        spec = dataclasses.replace(spec, checkpoints=raw.replace(" ", ""))
    if not args.evaluate:
        spec = None
    if args.require_flash_attn:
        from repro.stack_check import require_flash_attn

        sweep = dataclasses.replace(sweep, overrides=require_flash_attn(sweep.overrides, sweep.backbones))
    return dataclasses.replace(sweep, eval=spec if isinstance(spec, EvalSpec) else None)


def _launch(args: _Launch, states: tuple[str, ...], train: bool = True) -> None:
    from repro.launch.plan import CpuOptions

    if args.launcher not in LAUNCHERS:
        raise ReproError(f"unknown launcher {args.launcher!r}; valid launchers: {', '.join(LAUNCHERS)}")
    sweep = _load(args, need_eval=not train)
    options = CpuOptions(args.steps, args.batch)
    cells = sweep.cells(args.runs_root)
    if sweep.matched:  # the long runs not planned yet, and why: their budgets are read from runs not finished
        for line in sweep.matched_cells(args.runs_root)[1]:
            stderr_console().print(f"not yet: {line}", highlight=False, soft_wrap=True)
    if args.dry_run:
        _dry_run(args, sweep, options)
        return
    if args.launcher == "local":
        _launch_local(args, sweep, options, states, train)
        return
    from repro.sweep_submit import submit_sweep

    scheduler = _scheduler(args, sweep)
    scheduler.check()  # sbatch on PATH / the Ray Jobs API answering: one line and exit 2 before any cell
    err = stderr_console()
    limit = f"at most {args.max_parallel} in flight" if args.max_parallel else "no limit on cells in flight"
    err.print(f"sweep {sweep.name}: {len(cells)} cells to {args.launcher}, {limit}, runs in {args.runs_root}")
    time_limit = getattr(scheduler, "limit", None)
    if time_limit is not None and train:
        err.print(
            f"ray: each job stops at {time_limit.time} (asked to checkpoint and stop before it) and the cell "
            f"goes on in a new job, at most {time_limit.max_allocations} in all"
            + ("" if args.wait else "; only while a command waits (--wait): otherwise run it again to continue them"),
            highlight=False,
        )
    report = submit_sweep(
        sweep,
        scheduler,
        args.runs_root,
        options=options,
        max_parallel=args.max_parallel,
        states=states,
        train=train,
        wait=args.wait,
        retries=args.retries,
        poll=args.poll,
        on_event=lambda line: err.print(line, highlight=False),
    )
    table = Table(title=f"sweep {sweep.name} ({args.file}) on {args.launcher}")
    for column in ("cell", "state", "this command", "job"):
        table.add_column(column)
    if sweep.eval is not None:
        for column in ("eval", "eval job"):
            table.add_column(column)
    table.add_column("reason", overflow="fold")
    for c in report.cells:
        row = [c.name, Text(c.state, style=_STYLE.get(c.state, "")), c.action, c.job_id or ""]
        if sweep.eval is not None:
            eval_cell = Text(c.eval_state, style=_STYLE.get(c.eval_state, ""))
            row += [eval_cell, f"{c.eval_job_id or ''} {c.eval_action}".strip()]
        table.add_row(*row, Text(c.reason))
    console = stdout_console()
    console.print(table)
    counts: dict[str, int] = {}
    for c in report.cells:
        counts[c.state] = counts.get(c.state, 0) + 1
    console.print(", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    if not args.wait and any(c.state in ("queued", "running") for c in report.cells):
        console.print("jobs keep running after this command; `repro status --sweep FILE` follows them")
    if report.failed:
        raise typer.Exit(1)


def _dry_run(args: _Launch, sweep, options) -> None:
    import shlex

    from repro.cell_plan import plan_cell, verify_gpu_plans
    from repro.launch.plan import stack_report

    console = stdout_console()
    root = args.runs_root.absolute()
    plans = [plan_cell(cell, sweep, root, options) for cell in sweep.cells(root)]
    reports = verify_gpu_plans(plans, sweep)
    stack = stack_report(reports)
    if reports:  # the GPU cells' checkpoint disk, summed once for the whole sweep
        from repro.verl_plugin.preflight import sweep_disk_line

        stack.append(sweep_disk_line([report.disk for report in reports.values()]))
    from repro.weights_cache import plans_report_lines

    stack += plans_report_lines(plans)  # each backbone's weights once: where they are, or what fetching takes
    if args.launcher == "slurm":
        from repro.atomic import write_text
        from repro.launch.slurm import render_script

        scheduler = _scheduler(args, sweep)
        folder = root / LAUNCH_DIR / "dry-run"
        folder.mkdir(parents=True, exist_ok=True)
        written = 0
        for plan in plans:
            text = render_script(plan, scheduler.options, sweep_name=sweep.name, project_dir=Path.cwd())
            write_text(folder / f"{plan.name}.sbatch", text)
            written += 1
            if sweep.eval is not None:
                from repro.launch.eval_stage import render_eval_script
                from repro.sweep_submit import _eval_gpus

                eval_text = render_eval_script(
                    plan.run_dir,
                    plan.name,
                    sweep.eval,
                    scheduler.options,
                    gpus=_eval_gpus(plan, scheduler),
                    sweep_name=sweep.name,
                    project_dir=Path.cwd(),
                )
                write_text(folder / f"{plan.name}.eval.sbatch", eval_text)
                written += 1
        what = "training and evaluation" if sweep.eval is not None else "training"
        console.print(f"wrote {written} sbatch scripts ({what}) to {folder} (nothing submitted)")
        for line in stack:
            console.print(f"# {line}", soft_wrap=True, highlight=False, markup=False)
        return
    from repro.launch.eval_stage import eval_argv

    ray = _scheduler(args, sweep) if args.launcher == "ray" else None  # checks a time limit's options
    for plan in plans:
        argv = ray.cell_argv(plan) if ray is not None and ray.limit is not None else plan.argv
        console.print(" ".join(shlex.quote(a) for a in argv), soft_wrap=True, highlight=False)
        if sweep.eval is not None:
            then = " ".join(shlex.quote(a) for a in eval_argv(plan.run_dir, sweep.eval, plan.argv[0]))
            console.print(f"  then: {then}", soft_wrap=True, highlight=False)
    for line in stack:
        console.print(f"# {line}", soft_wrap=True, highlight=False, markup=False)
    console.print(f"# {len(plans)} cells; nothing launched")


def _launch_local(args: _Launch, sweep, options, states: tuple[str, ...], train: bool = True) -> None:
    from repro.arithmetic import usable_cores
    from repro.launch.local import run_local

    parallel = args.max_parallel or usable_cores()
    cells = sweep.cells(args.runs_root)
    only = None
    if states != LAUNCHABLE_DEFAULT:
        from repro.launch.state import cell_state

        only = {c.name for c in cells if cell_state(args.runs_root / c.name).state in states}
    if train:  # GPU cells: each backbone's weights into the cache once, here, not by cells racing for them
        from repro.weights_cache import fetch_all

        gpu = [c.backbone for c in cells if not c.is_cpu]
        fetch_all([b.hf_id or "" for b in gpu], lambda line: stderr_console().print(line))
    stderr_console().print(
        f"sweep {sweep.name}: {len(cells) if only is None else len(only)} cells, up to {parallel} at a time, "
        f"runs in {args.runs_root} (logs in {args.runs_root / LAUNCH_DIR})"
    )
    report = run_local(sweep, args.runs_root, max_parallel=parallel, extra_args=options.args(), only=only, train=train)

    table = Table(title=f"sweep {sweep.name} ({args.file})")
    for column, justify in (("cell", "left"), ("outcome", "left"), ("exit", "right"), ("time", "right")):
        table.add_column(column, justify=justify)
    if sweep.eval is not None:
        table.add_column("eval", justify="left")
        table.add_column("eval time", justify="right")
    table.add_column("note", overflow="fold")
    for o in report.outcomes:
        row = [
            o.name,
            Text(o.outcome, style=_STYLE.get(o.outcome, "")),
            "" if o.exit_code is None else str(o.exit_code),
            f"{o.seconds:.0f}s" if o.launched else "",
        ]
        if sweep.eval is not None:
            row += [
                Text(o.eval_outcome, style=_STYLE.get(o.eval_outcome, "")),
                f"{o.eval_seconds:.0f}s" if o.eval_seconds else "",
            ]
        table.add_row(*row, Text("; ".join(m for m in (o.message, o.eval_message) if m)))
    console = stdout_console()
    console.print(table)
    counts = {name: len(report.by_outcome(name)) for name in ("finished", "failed", "skipped", "running elsewhere")}
    line = ", ".join(f"{n} {name}" for name, n in counts.items())
    if sweep.eval is not None:
        evals: dict[str, int] = {}
        for o in report.outcomes:
            evals[o.eval_outcome] = evals.get(o.eval_outcome, 0) + 1
        line += "; evaluations: " + ", ".join(f"{n} {name}" for name, n in sorted(evals.items()))
    console.print(line)
    if report.failed:
        raise typer.Exit(1)
