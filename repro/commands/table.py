"""`repro table ...`: the paper's tables from results/ (written by `repro collect`), measured beside the paper."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from repro.atomic import write_text
from repro.console import stderr_console, stdout_console
from repro.errors import ReproError
from repro.report.schema import DEFAULT_RESULTS

if TYPE_CHECKING:
    import pandas as pd
# pandas and repro.report.tables are imported where used: every `repro` process (and every child a `python -m
# repro.cli` spawns) imports this module to build the CLI, and most never draw a table

app = typer.Typer(
    help="The paper's tables from results/ (`repro collect`), measured numbers beside the paper's.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


class Format(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    latex = "latex"
    csv = "csv"


SUFFIXES = {".md": Format.markdown, ".markdown": Format.markdown, ".tex": Format.latex, ".csv": Format.csv}

ResultsOpt = Annotated[
    Path, typer.Option("--results", help="The folder `repro collect` wrote (runs, training, eval tables).")
]
FormatOpt = Annotated[
    Format,
    typer.Option("--format", help="terminal (a rich table), markdown (pipe table), latex (booktabs tabular) or csv."),
]
OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Write the rendering to this file (atomically) instead of stdout; with --format terminal the "
        "file's suffix (.md, .tex, .csv) picks the format.",
    ),
]
PromptSetOpt = Annotated[str | None, typer.Option("--prompt-set", help="Only this prompt set (standard or hard).")]
MeasuredOnlyOpt = Annotated[
    bool, typer.Option("--measured-only", help="Leave out the paper's rows that no measured run reproduces.")
]


def load_table(results: Path, name: str) -> pd.DataFrame:
    """results/<name>.parquet (or .csv when only that is there); a missing one is a ReproError."""
    import pandas as pd

    hint = "run `repro collect` first"
    if not results.is_dir():
        raise ReproError(f"no results in {results}; {hint}")
    for path in (results / f"{name}.parquet", results / f"{name}.csv"):
        if path.is_file():
            try:
                return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
            except Exception as exc:  # a truncated or foreign file: the fix is the same
                raise ReproError(f"cannot read {path} ({type(exc).__name__}); rerun `repro collect`") from exc
    raise ReproError(f"no results in {results / (name + '.parquet')}; {hint}")


def _render(df: pd.DataFrame, fmt: Format) -> str:
    from repro.report import tables

    if fmt is Format.markdown:
        return tables.to_markdown(df)
    if fmt is Format.latex:
        return tables.to_latex(df)
    return tables.to_csv(df)


def _emit(df: pd.DataFrame, fmt: Format, out: Path | None, title: str) -> None:
    from repro.report import tables

    if fmt is Format.terminal:
        file_format = None
        if out is not None:
            file_format = SUFFIXES.get(out.suffix.lower())
            if file_format is None:
                raise ReproError(f"cannot tell the format of {out} from its suffix; pass --format markdown|latex|csv")
        console = stdout_console()
        table = tables.to_rich(df, title)
        # widen rather than cut numbers: a wide table wraps on a narrow terminal but loses nothing
        console.width = max(console.width, console.measure(table, options=console.options.update_width(10_000)).minimum)
        console.print(table)
        if file_format is not None:
            write_text(out, _render(df, file_format))
            stderr_console().print(f"wrote {escape(str(out))}")
        return
    text = _render(df, fmt)
    if out is None:
        typer.echo(text, nl=False)
    else:
        write_text(out, text)
        stderr_console().print(f"wrote {escape(str(out))}")


def _note_missing(df: pd.DataFrame, prefix: str, keys: tuple[str, ...]) -> None:
    """One dim line on stderr naming the rows with no measured number, grouped by backbone."""
    from repro.report import tables

    labels = tables.missing_measured(df)
    if not labels:
        return
    rest = [k for k in keys if k != "backbone"]
    missing = set(labels)
    parts = []
    for backbone, rows in df.groupby("backbone", sort=False):
        cells = ["/".join(str(row[k]) for k in rest) for _, row in rows.iterrows() if tables.row_label(row) in missing]
        if not cells:
            continue
        parts.append(f"{backbone} (all {len(cells)})" if len(cells) == len(rows) else f"{backbone}: {', '.join(cells)}")
    stderr_console().print(f"[dim]{escape(prefix)}: {escape('; '.join(parts))}[/dim]", soft_wrap=True)


def _run(
    build: Callable[[], pd.DataFrame], fmt: Format, out: Path | None, title: str, missing: tuple[str, tuple]
) -> None:
    df = build()
    _emit(df, fmt, out, title)
    _note_missing(df, *missing)


@app.command("weighted-average")
def weighted_average(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    fmt: FormatOpt = Format.terminal,
    out: OutOpt = None,
    prompt_set: PromptSetOpt = None,
    checkpoint: Annotated[
        str, typer.Option("--checkpoint", help="'final' (each run's last evaluated step) or a step number.")
    ] = "final",
    measured_only: MeasuredOnlyOpt = False,
) -> None:
    """Table 1: Ave@k per benchmark and the weighted average, in percent, measured beside the paper.

    One row per backbone x prompt set x method over the paper's rows and the measured runs (seeds
    averaged; n_seeds says how many), with the weighted average's 95% interval over seeds. "delta paper"
    is measured - paper (only when all four paper benchmarks were measured); "delta grpo-n4" is the mean
    paired difference to the same backbone and prompt set's GRPO-n4 over the seeds both trained (same
    seed: same data order; n_paired says how many), with its own 95% interval. Intervals are Student t,
    mean ± t(0.975, n-1)·s/√n: seeds are few, the t interval is exact for normal seed-to-seed noise and
    honest about small n, where a bootstrap over 3 values is degenerate; one seed gives no interval ("—").
    Missing cells are "—", never 0. A released checkpoint evaluated by name (`repro eval
    qwen2.5-math-1.5b-balance-easy`) is its own row, "seq-balance (released checkpoint)", right after the
    paper's row of the same backbone and prompt set and with that Table 1 row's paper numbers; a base
    model (`repro eval qwen2.5-math-1.5b`) is "base model" (prompt set "none"), first in its backbone.

    Examples:

      repro table weighted-average

      repro table weighted-average --prompt-set standard --measured-only

      repro table weighted-average --format latex --out paper_tables/generated/table1.tex

      repro table weighted-average --results results --format markdown
    """
    from repro.report import tables

    _run(
        lambda: tables.weighted_average_table(
            load_table(results, "eval"), prompt_set, checkpoint, measured_only=measured_only
        ),
        fmt,
        out,
        f"Ave@k (%), checkpoint: {checkpoint}; paper: Ave@32; 95% CI: Student t over seeds",
        ("no measured run", tables.GROUP_KEYS),
    )


@app.command("step-time")
def step_time(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    fmt: FormatOpt = Format.terminal,
    out: OutOpt = None,
    prompt_set: PromptSetOpt = None,
    measured_only: MeasuredOnlyOpt = False,
) -> None:
    """Table 2: seconds per training step and the cost relative to GRPO-n4, beside the paper's 8xH100 numbers.

    Measured seconds are the mean of `timing_s/step` over each run's steps except step 1, then over the
    runs of a backbone and method (n_runs); hardware differs from the paper's, so compare the relative
    columns.

    Examples:

      repro table step-time

      repro table step-time --format markdown --out step_time.md
    """
    from repro.report import tables

    _run(
        lambda: tables.step_time_table(load_table(results, "training"), prompt_set, measured_only=measured_only),
        fmt,
        out,
        "Seconds per training step; paper: 8xH100",
        ("no measured step time", ("backbone", "method")),
    )


@app.command("sampling")
def sampling(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    fmt: FormatOpt = Format.terminal,
    out: OutOpt = None,
    prompt_set: PromptSetOpt = None,
) -> None:
    """What the samplers did per step in the measured runs (means over steps, then seeds).

    Responses per step and per prompt, the share of update groups with signal (correct and wrong
    responses both present) and with zero variance, Seq's share of prompts unresolved after all rounds,
    the samples drawn beyond each prompt's first request, and the responses the update trains on.
    Shares are percentages.

    Examples:

      repro table sampling

      repro table sampling --prompt-set hard --format csv --out sampling.csv
    """
    from repro.report import tables

    _run(
        lambda: tables.sampling_table(load_table(results, "training"), prompt_set),
        fmt,
        out,
        "Sampling per training step",
        ("no sampler metrics", tables.GROUP_KEYS),
    )
