"""`repro sweep run` and `repro status`: launch a sweep file's grid, and see where every cell stands."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from repro.console import stderr_console, stdout_console
from repro.errors import ReproError
from repro.launch.local import LAUNCH_DIR
from repro.rundir import RunDir
from repro.sweep_submit import LAUNCHABLE as LAUNCHABLE_DEFAULT

app = typer.Typer(
    help=(
        "Run a whole grid from a sweep file (sweeps/*.yaml), one `repro run` per cell.\n\n"
        "Examples:\n\n"
        "  repro sweep run sweeps/tiny.yaml --steps 20   # the CPU miniature of the paper's grid\n\n"
        "  repro status --sweep sweeps/tiny.yaml           # where every cell stands"
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

LAUNCHERS = ("local", "slurm", "ray")

_STYLE = {
    "finished": "green",
    "failed": "red",
    "skipped": "dim",
    "running elsewhere": "yellow",
    "running": "yellow",
    "interrupted": "magenta",
    "pending": "dim",
    "unknown": "red",
    "done": "green",
    "partial": "yellow",
    "waiting": "dim",
    "queued": "yellow",
    "not started": "red",
}


def _default_parallel() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 1)


FileArg = Annotated[Path, typer.Argument(help="Sweep file, e.g. sweeps/tiny.yaml.")]
LauncherOpt = Annotated[
    str,
    typer.Option(
        "--launcher", help="local (subprocesses here), slurm (one sbatch job per cell) or ray (Ray Jobs API)."
    ),
]
RunsRootOpt = Annotated[Path, typer.Option("--runs-root", help="Folder holding one folder per run.")]
ParallelOpt = Annotated[
    int | None,
    typer.Option(
        "--max-parallel",
        min=1,
        help="Cells in flight at once (local default: the number of CPU cores; slurm/ray default: no limit).",
    ),
]
StepsOpt = Annotated[int | None, typer.Option("--steps", min=1, help="CPU cells: training steps (default: catalog).")]
BatchOpt = Annotated[int | None, typer.Option("--batch", min=1, help="CPU cells: prompts per step (default: catalog).")]
WaitOpt = Annotated[
    bool,
    typer.Option(
        "--wait/--no-wait",
        help="slurm/ray: keep watching until every cell has ended, filling free slots and retrying failures.",
    ),
]
RetriesOpt = Annotated[
    int, typer.Option("--retries", min=0, help="slurm/ray with --wait: resubmissions of a failed cell.")
]
PollOpt = Annotated[float, typer.Option("--poll", min=0.1, help="slurm/ray with --wait: seconds between checks.")]
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Write (slurm) or print (local, ray) what would be launched, and launch nothing.",
    ),
]
AccountOpt = Annotated[str | None, typer.Option("--account", help="slurm: --account (else the sweep file's).")]
PartitionOpt = Annotated[str | None, typer.Option("--partition", help="slurm: --partition.")]
TimeOpt = Annotated[str | None, typer.Option("--time", help="slurm: time limit per cell, e.g. 2-00:00:00.")]
GpusOpt = Annotated[
    int | None, typer.Option("--gpus-per-node", min=1, help="slurm: GPUs per node (default: the backbone's).")
]
CpusOpt = Annotated[int | None, typer.Option("--cpus-per-task", min=1, help="slurm: CPUs per node.")]
MemOpt = Annotated[str | None, typer.Option("--mem", help="slurm: memory per node, e.g. 0 (all) or 400G.")]
MarginOpt = Annotated[
    int | None,
    typer.Option(
        "--signal-margin",
        min=1,
        help="slurm: seconds before the time limit when the cell is asked to checkpoint and stop, then requeued "
        "(default: 900 for GPU cells, one step plus a save; 60 for CPU cells).",
    ),
]
AllocationsOpt = Annotated[
    int | None,
    typer.Option("--max-allocations", min=1, help="slurm: allocations a cell may span by requeueing (default 4)."),
]
RayAddressOpt = Annotated[
    str | None, typer.Option("--ray-address", help="ray: the Jobs API address (default http://127.0.0.1:8265).")
]
EvalOpt = Annotated[
    bool,
    typer.Option(
        "--eval/--no-eval",
        help="Run the sweep file's evaluation stage (`eval:`) after each cell's training (default: yes).",
    ),
]
RequireFlashAttnOpt = Annotated[
    bool,
    typer.Option(
        "--require-flash-attn",
        help="GPU cells: fail a job whose node cannot import flash-attn, instead of running it with sdpa "
        "(slower, same result; the default).",
    ),
]
EvalCheckpointsOpt = Annotated[
    str | None,
    typer.Option(
        "--eval-checkpoints",
        help="Override the sweep file's eval.checkpoints: final, all, or a comma list of steps.",
    ),
]
PythonOpt = Annotated[
    str | None, typer.Option("--python", help="ray: the Python interpreter on the cluster (default: python).")
]


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
        """From a command's parameters (its `locals()`), so `run` and `retry-failed` share one mapping."""
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
            ray_flags={"address": options["ray_address"], "python": options["python"]},
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
    ray = {**sweep.ray, **{k: v for k, v in args.ray_flags.items() if v is not None}}
    return RayScheduler(address=ray.get("address") or DEFAULT_ADDRESS, python=ray.get("python") or "python")


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
    cells = sweep.cells()
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
    plans = [plan_cell(cell, sweep, root, options) for cell in sweep.cells()]
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

    for plan in plans:
        console.print(" ".join(shlex.quote(a) for a in plan.argv), soft_wrap=True, highlight=False)
        if sweep.eval is not None:
            then = " ".join(shlex.quote(a) for a in eval_argv(plan.run_dir, sweep.eval, plan.argv[0]))
            console.print(f"  then: {then}", soft_wrap=True, highlight=False)
    for line in stack:
        console.print(f"# {line}", soft_wrap=True, highlight=False, markup=False)
    console.print(f"# {len(plans)} cells; nothing launched")


def _launch_local(args: _Launch, sweep, options, states: tuple[str, ...], train: bool = True) -> None:
    from repro.launch.local import run_local

    parallel = args.max_parallel or _default_parallel()
    cells = sweep.cells()
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


@app.command("run")
def run(
    file: FileArg,
    launcher: LauncherOpt = "local",
    runs_root: RunsRootOpt = Path("runs"),
    max_parallel: ParallelOpt = None,
    steps: StepsOpt = None,
    batch: BatchOpt = None,
    wait: WaitOpt = False,
    retries: RetriesOpt = 1,
    poll: PollOpt = 30.0,
    dry_run: DryRunOpt = False,
    account: AccountOpt = None,
    partition: PartitionOpt = None,
    time: TimeOpt = None,
    gpus_per_node: GpusOpt = None,
    cpus_per_task: CpusOpt = None,
    mem: MemOpt = None,
    signal_margin: MarginOpt = None,
    max_allocations: AllocationsOpt = None,
    ray_address: RayAddressOpt = None,
    python: PythonOpt = None,
    evaluate: EvalOpt = True,
    eval_checkpoints: EvalCheckpointsOpt = None,
    require_flash_attn: RequireFlashAttnOpt = False,
) -> None:
    """Launch every cell of a sweep file that has not finished yet; print one line per cell.

    Each cell is `repro run --model B --method M --prompt-set P --seed S` (GPU cells: verl behind
    `python -m repro.launch.attempt`), so a finished cell is skipped and an interrupted or failed one resumes
    from its last checkpoint: running the same command again only does what is left, and two sweeps
    started at once split the work (a per-cell lock under `RUNS_ROOT/.launch/`).

    * **local** runs the cells here, `--max-parallel` at a time, and returns when they have ended.
    * **slurm** writes `RUN/slurm/job.sbatch` per cell (readable, resubmittable with `sbatch`), submits it
      and records the job id in `RUN/jobs.jsonl`; multi-node cells start a Ray cluster across the allocation
      first. Options come from the flags, else the sweep file's `slurm:` mapping.
    * **ray** submits each cell to a running Ray cluster through the Jobs API, uploading this project as
      the job's working directory.

    With slurm or ray the command returns once the jobs are submitted; `--wait` keeps it watching until
    every cell has ended, filling free slots (`--max-parallel`) and resubmitting failures (`--retries`).
    Exit code 1 if any cell failed.

    A sweep file with `eval:` (benchmarks, k, checkpoints: final | all | [steps], grading, shards) also
    evaluates each cell once its training has succeeded: local right after the cell's run; slurm as a job
    `--dependency=afterok:<training job>` (RUN/slurm/eval.sbatch; removed by Slurm if training fails);
    ray as a job the training job submits as its last act. A cell whose evaluation records are complete is
    not evaluated again; `repro sweep eval` runs only this stage.

    Examples:

      repro sweep run sweeps/tiny.yaml --steps 20 --max-parallel 2

      repro sweep run sweeps/paper.yaml --launcher slurm --account my-acct --partition gpu --dry-run

      repro sweep run sweeps/paper.yaml --launcher slurm --max-parallel 8 --wait --retries 2

      repro sweep run sweeps/tiny.yaml --launcher ray --ray-address http://head:8265
    """
    _launch(_Launch.from_options(locals()), LAUNCHABLE_DEFAULT)


@app.command("eval")
def eval_stage(
    file: FileArg,
    launcher: LauncherOpt = "local",
    runs_root: RunsRootOpt = Path("runs"),
    max_parallel: ParallelOpt = None,
    wait: WaitOpt = False,
    poll: PollOpt = 30.0,
    eval_checkpoints: EvalCheckpointsOpt = None,
    account: AccountOpt = None,
    partition: PartitionOpt = None,
    time: TimeOpt = None,
    gpus_per_node: GpusOpt = None,
    cpus_per_task: CpusOpt = None,
    mem: MemOpt = None,
    ray_address: RayAddressOpt = None,
    python: PythonOpt = None,
) -> None:
    """Run only the evaluation stage (`eval:` of the sweep file) for cells trained earlier: each trained
    cell whose records are incomplete is evaluated (local) or gets an evaluation job (slurm, ray); a Slurm
    cell still training gets one behind its job (afterok). Nothing is trained.

    Examples:

      repro sweep eval sweeps/tiny.yaml --max-parallel 2

      repro sweep eval sweeps/paper.yaml --launcher slurm --partition gpu --eval-checkpoints final
    """
    options = {**locals(), "steps": None, "batch": None, "retries": 0, "evaluate": True}
    _launch(_Launch.from_options(options), LAUNCHABLE_DEFAULT, train=False)


@app.command("retry-failed")
def retry_failed(
    file: FileArg,
    launcher: LauncherOpt = "local",
    runs_root: RunsRootOpt = Path("runs"),
    max_parallel: ParallelOpt = None,
    steps: StepsOpt = None,
    batch: BatchOpt = None,
    wait: WaitOpt = False,
    retries: RetriesOpt = 0,
    poll: PollOpt = 30.0,
    account: AccountOpt = None,
    partition: PartitionOpt = None,
    time: TimeOpt = None,
    gpus_per_node: GpusOpt = None,
    cpus_per_task: CpusOpt = None,
    mem: MemOpt = None,
    signal_margin: MarginOpt = None,
    max_allocations: AllocationsOpt = None,
    ray_address: RayAddressOpt = None,
    python: PythonOpt = None,
) -> None:
    """Launch again only the cells of a sweep that failed or were interrupted; each resumes from its last
    checkpoint. Pending cells are left for `repro sweep run`.

    Examples:

      repro sweep retry-failed sweeps/tiny.yaml

      repro sweep retry-failed sweeps/paper.yaml --launcher slurm --time 1-00:00:00
    """
    _launch(_Launch.from_options(locals()), ("failed", "interrupted"))


def _cell_names(runs_root: Path, sweep: Path | None, cells: list[str] | None = None) -> list[str]:
    """The cells a command is about: named ones, a sweep file's, or every run folder under runs_root."""
    if cells:
        return list(cells)
    if sweep is not None:
        from repro.sweep import load_sweep

        return [c.name for c in load_sweep(sweep).cells()]
    if not runs_root.is_dir():
        raise ReproError(f"{runs_root} does not exist; pass --runs-root, or --sweep to list pending cells")
    return sorted(
        p.name
        for p in runs_root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / "status.json").exists()
    )


def status(
    runs_root: Annotated[Path, typer.Option("--runs-root", help="Folder holding one folder per run.")] = Path("runs"),
    sweep: Annotated[
        Path | None,
        typer.Option("--sweep", help="Show this sweep file's cells, pending ones included (default: every run)."),
    ] = None,
    ask_scheduler: Annotated[
        bool,
        typer.Option("--scheduler/--no-scheduler", help="Ask Slurm / Ray about cells whose job is not running."),
    ] = True,
) -> None:
    """Show every cell's state: pending, queued, running, finished, failed, interrupted or cancelled, with why;
    the steps it lost to interruptions; and, with --sweep, its evaluation stage: pending, waiting (behind its
    training job), queued, running, done (with the final checkpoint's weighted Ave@k), failed (with its
    log) or not started (training failed).

    The run folder says what it knows (status.json, and the run's lock for "running"), so this is right
    whichever launcher or shell started a run; a run whose process died shows as interrupted. For a cell
    submitted to Slurm or Ray (`RUN/jobs.jsonl`), the scheduler fills in the rest: a job still queued, or
    one that ended before training could start (its last output line is the reason).

    Examples:

      repro status

      repro status --sweep sweeps/tiny.yaml

      repro status --runs-root /scratch/runs --sweep sweeps/paper.yaml
    """
    from repro.launch.eval_stage import eval_state
    from repro.launch.state import cell_state

    names = _cell_names(runs_root, sweep)
    spec = None
    if sweep is not None:
        from repro.sweep import load_sweep

        spec = load_sweep(sweep).eval
    console = stdout_console()
    if not names:
        console.print(f"no runs in {runs_root}")
        return
    counts: dict[str, int] = {}
    eval_counts: dict[str, int] = {}
    rows = []
    for name in names:
        path = runs_root / name
        cs = cell_state(path, ask_scheduler=ask_scheduler)
        counts[cs.state] = counts.get(cs.state, 0) + 1
        job = f"{cs.job['launcher']} {cs.job['job_id']}" if cs.job else ""
        es = eval_state(path, spec, cs.state, ask_scheduler=ask_scheduler) if spec else _evaluated(path)
        eval_counts[es.state] = eval_counts.get(es.state, 0) + 1
        shown = es.state + (f" {100 * es.weighted:.1f}%" if es.weighted is not None else "")
        notes = (cs.reason, _attention(path), f"eval: {es.reason}" if es.reason and es.state != "off" else "")
        reasons = [r for r in notes if r]
        rows.append((name, cs, job, _lost(path), es, shown, "; ".join(reasons)))
    # the steps-lost and eval columns only where they say something, so the reason keeps its width
    show_lost = any(lost not in ("", "0") for _, _, _, lost, *_ in rows)
    show_eval = spec is not None or any(es.state != "off" for *_, es, _, _ in rows)
    table = Table(title=f"runs in {runs_root}" + (f" for {sweep}" if sweep else ""))
    for column, justify in (("cell", "left"), ("state", "left"), ("attempts", "right"), ("job", "left")):
        table.add_column(column, justify=justify)
    if show_lost:
        table.add_column("steps lost", justify="right")
    if show_eval:
        table.add_column("eval", justify="left")
    table.add_column("reason", overflow="fold")
    for name, cs, job, lost, es, shown, reason in rows:
        row = [name, Text(cs.state, style=_STYLE.get(cs.state, "")), str(cs.attempts), job]
        row += [lost] if show_lost else []
        row += [Text(shown, style=_STYLE.get(es.state, ""))] if show_eval else []
        table.add_row(*row, Text(reason))
    console.print(table)
    console.print(", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    if spec is not None:
        console.print("evaluation: " + ", ".join(f"{n} {state}" for state, n in sorted(eval_counts.items())))


def _attention(path: Path) -> str:
    """The attention the run's last attempt fell back to (no flash-attn on its node), as a status note."""
    import json

    try:
        attempts = json.loads((path / "status.json").read_text()).get("attempts") or []
    except (OSError, ValueError, AttributeError):
        return ""
    last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
    used = last.get("attention")
    if not isinstance(used, dict):
        return ""
    return f"attention: {used.get('used')} instead of {used.get('asked')} ({used.get('why', '')})"


def _lost(path: Path) -> str:
    """Steps a run trained and lost to interruptions (time limits, preemption), from its attempts."""
    try:
        from repro.launch.allocations import allocations
    except ImportError:  # the continuation support is not there
        return ""
    try:
        _count, lost = allocations(path)
    except Exception:  # a half-written folder: the state column says what is wrong
        return ""
    return str(lost)


def _evaluated(path: Path):
    """Without a sweep file: what evaluations the run folder holds (checkpoints with a summary)."""
    import json

    from repro.launch.eval_stage import EvalState

    summaries = sorted(path.glob("eval/global_step_*/summary.json"), key=lambda p: int(p.parent.name.split("_")[-1]))
    if not summaries:
        return EvalState("off")
    try:
        weighted = json.loads(summaries[-1].read_text()).get("weighted_average")
    except (OSError, ValueError):
        weighted = None
    steps = tuple(int(p.parent.name.split("_")[-1]) for p in summaries)
    return EvalState("done", f"checkpoints {', '.join(map(str, steps))}", weighted, None, steps)


def cancel(
    cells: Annotated[list[str] | None, typer.Argument(help="Cell names (run folder names); default: all.")] = None,
    runs_root: Annotated[Path, typer.Option("--runs-root", help="Folder holding one folder per run.")] = Path("runs"),
    sweep: Annotated[Path | None, typer.Option("--sweep", help="Cancel this sweep file's cells.")] = None,
) -> None:
    """Stop cells that are queued or running: `scancel` for Slurm jobs, stop_job for Ray jobs, SIGTERM for a
    local `repro run`. A stopped run is recorded as interrupted (or cancelled) and resumes from its last
    checkpoint when launched again; nothing in its folder is deleted.

    Examples:

      repro cancel --sweep sweeps/paper.yaml

      repro cancel tiny-arith__est__standard__s0
    """
    import signal

    from repro.launch.state import cell_state, scheduler_for

    names = _cell_names(runs_root, sweep, cells)
    console = stdout_console()
    done = 0
    for name in names:
        path = runs_root / name
        if not path.exists():
            if cells:
                raise ReproError(f"{path} does not exist; `repro status` lists the cells")
            continue
        cs = cell_state(path)
        if not cs.active:
            continue
        attempts = RunDir(path).status().get("attempts") or []
        last = attempts[-1] if attempts else {}
        job = cs.job if cs.job and (cs.state == "queued" or last.get("job_id") == cs.job.get("job_id")) else None
        if job is not None and (owner := scheduler_for(job)) is not None:
            owner.cancel(job)
            console.print(f"{name}: cancelled {job['launcher']} job {job['job_id']}")
        elif cs.state == "running" and last.get("pid") and last.get("host") == socket.gethostname():
            os.kill(int(last["pid"]), signal.SIGTERM)
            console.print(f"{name}: sent SIGTERM to pid {last['pid']}")
        else:
            console.print(f"{name}: running on {last.get('host')} (pid {last.get('pid')}); stop it there")
            continue
        done += 1
    console.print(f"{done} cell(s) cancelled" if done else "nothing to cancel: no cell is queued or running")
