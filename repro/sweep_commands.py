"""`repro sweep run` and `repro status`: launch a sweep file's grid, and see where every cell stands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from repro.console import stderr_console, stdout_console
from repro.errors import ReproError
from repro.rundir import RunDir, cell_name

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
}


def _default_parallel() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 1)


@app.command("run")
def run(
    file: Annotated[Path, typer.Argument(help="Sweep file, e.g. sweeps/tiny.yaml.")],
    launcher: Annotated[str, typer.Option("--launcher", help="Where cells run: local (subprocesses here).")] = "local",
    runs_root: Annotated[Path, typer.Option("--runs-root", help="Folder holding one folder per run.")] = Path("runs"),
    max_parallel: Annotated[
        int | None,
        typer.Option("--max-parallel", min=1, help="Cells running at once (default: the number of CPU cores)."),
    ] = None,
    steps: Annotated[
        int | None, typer.Option("--steps", min=1, help="CPU cells: training steps (default: catalog).")
    ] = None,
    batch: Annotated[
        int | None, typer.Option("--batch", min=1, help="CPU cells: prompts per step (default: catalog).")
    ] = None,
) -> None:
    """Run every cell of a sweep file that has not finished yet, and print one line per cell.

    Each cell is `repro run --model B --method M --prompt-set P --seed S --runs-root RUNS_ROOT`, so a
    finished cell is skipped and an interrupted one resumes from its last checkpoint: running the same
    command again only does what is left. Two sweeps started at once split the work instead of doubling
    it (each cell is claimed through `RUNS_ROOT/.launch/<cell>.lock`; launch records and logs sit beside
    it). Exit code 1 if any cell failed.

    Examples:

      repro sweep run sweeps/tiny.yaml     # the CPU miniature, catalog defaults

      repro sweep run sweeps/tiny.yaml --steps 20 --batch 8 --max-parallel 2

      repro sweep run sweeps/tiny.yaml --runs-root /scratch/runs && repro status --sweep sweeps/tiny.yaml
    """
    from repro.launch.local import run_local
    from repro.sweep import load_sweep

    if launcher != "local":
        raise ReproError("the slurm and ray launchers are not available yet; use --launcher local")
    sweep = load_sweep(file)
    parallel = max_parallel or _default_parallel()
    extra: list[str] = []
    if steps is not None:
        extra += ["--steps", str(steps)]
    if batch is not None:
        extra += ["--batch", str(batch)]
    cells = sweep.cells()
    stderr_console().print(
        f"sweep {sweep.name}: {len(cells)} cells, up to {parallel} at a time, runs in {runs_root} "
        f"(logs in {runs_root / '.launch'})"
    )
    report = run_local(sweep, runs_root, max_parallel=parallel, extra_args=extra)

    table = Table(title=f"sweep {sweep.name} ({file})")
    for column, justify in (("cell", "left"), ("outcome", "left"), ("exit", "right"), ("time", "right")):
        table.add_column(column, justify=justify)
    table.add_column("note", overflow="fold")
    for o in report.outcomes:
        table.add_row(
            o.name,
            Text(o.outcome, style=_STYLE.get(o.outcome, "")),
            "" if o.exit_code is None else str(o.exit_code),
            f"{o.seconds:.0f}s" if o.launched else "",
            Text(o.message),
        )
    console = stdout_console()
    console.print(table)
    counts = {name: len(report.by_outcome(name)) for name in ("finished", "failed", "skipped", "running elsewhere")}
    console.print(", ".join(f"{n} {name}" for name, n in counts.items()))
    if report.failed:
        raise typer.Exit(1)


def _reason(run: RunDir, state: str) -> str:
    """Why a run is where it is: the last attempt's error, or how many attempts it took."""
    attempts = run.status().get("attempts") or []
    last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
    if state in ("failed", "interrupted") and last.get("error"):
        return str(last["error"])
    if state == "interrupted":
        return "stopped mid-run; `repro run` (or the sweep) again resumes it"
    if state == "running" and last.get("pid"):
        return f"pid {last['pid']} on {last.get('host', '?')}"
    return ""


def _row(path: Path) -> tuple[str, str, str]:
    """(state, attempts, reason) of one run folder; a missing folder is a pending cell."""
    if not path.exists():
        return "pending", "0", ""
    run = RunDir(path)
    try:
        state = run.state
        attempts = len(run.status().get("attempts") or [])
        return state, str(attempts), _reason(run, state)
    except ReproError as exc:
        return "unknown", "", str(exc)


def status(
    runs_root: Annotated[Path, typer.Option("--runs-root", help="Folder holding one folder per run.")] = Path("runs"),
    sweep: Annotated[
        Path | None,
        typer.Option("--sweep", help="Show this sweep file's cells, pending ones included (default: every run)."),
    ] = None,
) -> None:
    """Show every run's state: pending, running, finished, failed or interrupted, with the failure reason.

    States come from the run folders themselves (status.json, and the run's lock for "running"), so this
    is right whichever launcher or shell started a run; a run whose process died shows as interrupted.
    With `--sweep`, every cell of the sweep file is listed, those without a run folder as pending.

    Examples:

      repro status

      repro status --sweep sweeps/tiny.yaml

      repro status --runs-root /scratch/runs --sweep sweeps/paper.yaml
    """
    if sweep is not None:
        from repro.sweep import load_sweep

        names = [cell_name(c.backbone, c.method, c.prompt_set, c.seed) for c in load_sweep(sweep).cells()]
    else:
        if not runs_root.is_dir():
            raise ReproError(f"{runs_root} does not exist; pass --runs-root, or --sweep to list pending cells")
        names = sorted(
            p.name
            for p in runs_root.iterdir()
            if p.is_dir() and not p.name.startswith(".") and (p / "status.json").exists()
        )
    table = Table(title=f"runs in {runs_root}" + (f" for {sweep}" if sweep else ""))
    for column, justify in (("cell", "left"), ("state", "left"), ("attempts", "right")):
        table.add_column(column, justify=justify)
    table.add_column("reason", overflow="fold")
    counts: dict[str, int] = {}
    for name in names:
        state, attempts, reason = _row(runs_root / name)
        counts[state] = counts.get(state, 0) + 1
        table.add_row(name, Text(state, style=_STYLE.get(state, "")), attempts, Text(reason))
    console = stdout_console()
    if not names:
        console.print(f"no runs in {runs_root}")
        return
    console.print(table)
    console.print(", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
