"""`repro collect`: run folders -> results/ (the runs, training and eval tables, as Parquet and CSV)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from repro.console import stderr_console, stdout_console
from repro.report.schema import DEFAULT_RESULTS


def collect(
    runs_root: Annotated[
        Path, typer.Option("--runs-root", help="The folder holding one subfolder per run (as `repro run` makes).")
    ] = Path("runs"),
    results: Annotated[
        Path, typer.Option("--results", help="Where the tables go: runs, training and eval, each as .parquet and .csv.")
    ] = Path(DEFAULT_RESULTS),
) -> None:
    """Collect every run under the runs root into tidy tables in the results folder.

    runs: one row per run (state, steps logged, corrupt lines). training: one row per run x step, one column
    per logged metric. eval: one row per run x checkpoint x benchmark, plus the weighted average.

    Attempts of a resumed run are merged by step (the later attempt wins); corrupt or torn metrics lines are
    skipped and counted. Each file is replaced atomically and concurrent collects take turns on
    results/.collect.lock, so readers always see whole files.

    Examples:

      repro collect

      repro collect --runs-root /scratch/runs --results results

      repro collect && repro table weighted-average
    """
    from repro.report.collect import collect as run_collect

    report = run_collect(runs_root, results)
    table = Table(title=f"runs collected from {runs_root}")
    for column, justify in (
        ("run", "left"),
        ("state", "left"),
        ("steps", "right"),
        ("eval checkpoints", "left"),
        ("corrupt lines skipped", "right"),
    ):
        table.add_column(column, justify=justify)
    for info in report.runs:
        corrupt = f"[yellow]{info.corrupt_lines}[/yellow]" if info.corrupt_lines else "0"
        checkpoints = ", ".join(str(s) for s in info.eval_checkpoints) or "-"
        table.add_row(info.run, info.state, str(info.steps_logged), checkpoints, corrupt)
    out = stdout_console()
    out.print(table)
    err = stderr_console()
    for name, reason in report.skipped:
        err.print(f"[yellow]skipped[/yellow] {name}: {reason}", highlight=False, soft_wrap=True)
    for warning in report.warnings:
        err.print(f"[yellow]warning[/yellow] {warning}", highlight=False, soft_wrap=True)
    if report.corrupt_total:
        err.print(
            f"[yellow]{report.corrupt_total} corrupt metrics line(s) skipped[/yellow] "
            "(torn tails of killed attempts, or damaged files); per run in the table above",
            highlight=False,
        )
    if report.not_runs:
        err.print(f"{len(report.not_runs)} folder(s) under {runs_root} are not runs and were ignored", highlight=False)
    sizes = {name: len(frame) for name, frame in report.tables.items()}
    out.print(f"{len(report.runs)} run(s): " + ", ".join(f"{n} {name} rows" for name, n in sizes.items()))
    for path in report.written:
        out.print(f"wrote {path}", highlight=False, soft_wrap=True)
