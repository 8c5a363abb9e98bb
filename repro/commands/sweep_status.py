"""`repro status` and `repro cancel`: read every cell's state from its run folder (and its scheduler), and
stop the ones in flight; they act on run folders whatever launched them, so they stand apart from the launch."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from repro.commands.sweep_options import _STYLE
from repro.console import stdout_console
from repro.errors import ReproError
from repro.rundir import RunDir


def _cell_names(runs_root: Path, sweep: Path | None, cells: list[str] | None = None) -> list[str]:
    """The cells a command is about: named ones, a sweep file's, or every run folder under runs_root."""
    if cells:
        return list(cells)
    if sweep is not None:
        from repro.sweep import load_sweep

        return [c.name for c in load_sweep(sweep).cells(runs_root)]
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
    the steps it lost to interruptions; what ended each allocation of a cell that took several (the warning,
    the time limit, a cancel) and where its trainer was then (starting, during step N, saving step N, after
    step N, after the last step); and, with --sweep, its evaluation stage: pending, waiting (behind its
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
        rows.append((name, cs, job, _lost(path), es, shown, "; ".join(reasons), _ends(path), _tokens(path)))
    # the steps-lost, eval and allocation-end columns only where they say something, so the reason keeps its width
    show_lost = any(lost not in ("", "0") for _, _, _, lost, *_ in rows)
    show_ends = any(len(ends) > 1 for *_, ends, _tokens in rows)
    show_eval = spec is not None or any(es.state != "off" for _, _, _, _, es, *_ in rows)
    show_tokens = any(row[-1] for row in rows)
    table = Table(title=f"runs in {runs_root}" + (f" for {sweep}" if sweep else ""))
    for column, justify in (("cell", "left"), ("state", "left"), ("attempts", "right"), ("job", "left")):
        table.add_column(column, justify=justify)
    if show_tokens:
        table.add_column("tokens / budget", justify="right")
    if show_lost:
        table.add_column("steps lost", justify="right")
    if show_eval:
        table.add_column("eval", justify="left")
    if show_ends:
        table.add_column("allocation ends", overflow="fold")
    table.add_column("reason", overflow="fold")
    for name, cs, job, lost, es, shown, reason, ends, tokens in rows:
        row = [name, Text(cs.state, style=_STYLE.get(cs.state, "")), str(cs.attempts), job]
        row += [tokens] if show_tokens else []
        row += [lost] if show_lost else []
        row += [Text(shown, style=_STYLE.get(es.state, ""))] if show_eval else []
        row += [Text("; ".join(ends))] if show_ends else []
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


def _tokens(path: Path) -> str:
    """A run with a token budget (`repro run --until-tokens`): the tokens it generated so far over the budget;
    '' for a run without one (or a folder without a readable config)."""
    import yaml

    from repro.rundir import RunDir
    from repro.sampling.metrics import GENERATED

    try:
        config = yaml.safe_load((path / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return ""
    train = config.get("train") if isinstance(config, dict) else None
    budget = train.get("until_tokens", 0) if isinstance(train, dict) else 0
    if not budget:
        return ""
    done = sum(data.get(GENERATED, 0.0) for data in RunDir(path).read_metrics().by_step.values())
    return f"{done:,.0f} / {budget:,} ({min(100.0, 100.0 * done / budget):.0f}%)"


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


def _ends(path: Path) -> list[str]:
    """What ended each of the run's allocations, and where its trainer was (repro.launch.allocations)."""
    from repro.launch.allocations import allocation_ends

    return allocation_ends(path)


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
