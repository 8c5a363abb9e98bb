"""`repro report`: results/REPORT.md from the tables `repro collect` wrote (builder: repro.report.report)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from repro.atomic import write_text
from repro.commands.table import load_table
from repro.console import stderr_console
from repro.errors import ReproError
from repro.report.schema import DEFAULT_RESULTS, MATCHED_TABLES


def report(
    results: Annotated[
        Path, typer.Option("--results", help="The folder `repro collect` wrote (eval and training tables, figures/).")
    ] = Path(DEFAULT_RESULTS),
    out: Annotated[
        Path | None, typer.Option("--out", help="Where to write the report (atomically). Default: RESULTS/REPORT.md.")
    ] = None,
    checkpoint: Annotated[
        str, typer.Option("--checkpoint", help="'final' (each run's last evaluated step) or a step number.")
    ] = "final",
) -> None:
    """Write REPORT.md: the tables, links to the figures, and one sentence per comparison the paper makes.

    Each sentence gives the measured paired difference (same backbone, prompt set and seed) with its 95%
    Student t interval over seeds and the number of seeds, the paper's difference (tiny-arith against the
    paper's Qwen2.5-Math-1.5B rows), and a verdict: agrees (the interval excludes 0 with the paper's sign),
    disagrees (it excludes 0 with the other sign) or cannot tell (it contains 0, or one seed: no interval).

    Examples:

      repro report

      repro report --results results --out results/REPORT.md
    """
    from repro.report import report as builder  # pandas: not for every `repro` process that builds the CLI

    eval_df = load_table(results, "eval")
    try:
        training_df = load_table(results, "training")
    except ReproError:  # the report still has Table 1 and the sentences; it says the step-time table is absent
        training_df = None
    target = out if out is not None else results / "REPORT.md"
    figures = builder.figure_links(results / "figures", target.resolve().parent)
    try:
        runs_df = load_table(results, "runs")
    except ReproError:  # no runs table: the report has no arithmetic line
        runs_df = None
    matched_tables = {}
    for name in MATCHED_TABLES:  # the compute-matched long runs; absent from results collected before them
        with contextlib.suppress(ReproError):
            matched_tables[name] = load_table(results, name)
    text = builder.build_report(
        eval_df,
        training_df,
        figures,
        source=str(results),
        checkpoint=checkpoint,
        runs_df=runs_df,
        matched_tables=matched_tables if len(matched_tables) == len(MATCHED_TABLES) else None,
    )
    write_text(target, text)
    stderr_console().print(f"wrote {escape(str(target))}", soft_wrap=True)
