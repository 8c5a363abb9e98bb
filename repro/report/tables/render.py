"""The renderers every table shares (markdown, LaTeX, CSV, rich), and the rows a table holds without a measured
number: a builder's DataFrame in, text out, with missing cells and intervals printed the same way everywhere."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import pandas as pd

from repro.report.tables.common import (
    _DECIMALS,
    _MEASURED,
    CI_HIGH,
    CI_LOW,
    CI_SHOWN,
    GROUP_KEYS,
    MISSING,
    MISSING_LATEX,
)


def row_label(row: pd.Series | dict) -> str:
    """ "backbone/prompt_set/method" (the key columns the row has)."""
    return "/".join(str(row[k]) for k in GROUP_KEYS if k in row)


def missing_measured(table: pd.DataFrame) -> list[str]:
    """Labels of the rows with no measured number at all (paper rows no run reproduced, runs without logs)."""
    measured = [c for c in table.attrs.get(_MEASURED, ()) if c in table.columns]
    measured = measured or [c for c in table.columns if str(c).endswith(" measured")]
    if not measured or table.empty:
        return []
    empty = table[measured].isna().all(axis=1)
    return [row_label(row) for _, row in table[empty].iterrows()]


def _is_missing(value: object) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _infer_decimals(values: pd.Series) -> int:
    best = 0
    for v in values.dropna().astype(float):
        if not math.isfinite(v):
            continue
        d = next((d for d in range(5) if abs(v - round(v, d)) < 1e-9), 4)
        best = max(best, d)
    return best


def _formatters(df: pd.DataFrame) -> list[tuple[bool, object]]:
    """Per column: (numeric, value -> text) for present values."""
    decimals = df.attrs.get(_DECIMALS, {})
    out = []
    for column in df.columns:
        series = df[column]
        if pd.api.types.is_bool_dtype(series):
            out.append((False, str))
        elif pd.api.types.is_integer_dtype(series):
            out.append((True, lambda v: str(int(v))))
        elif pd.api.types.is_float_dtype(series):
            d = decimals.get(column, _infer_decimals(series))
            signed = str(column).startswith("delta")
            out.append((True, _float_formatter(d, signed)))
        else:
            out.append((False, str))
    return out


def _float_formatter(decimals: int, signed: bool):
    def fmt(value: object) -> str:
        v = round(float(value), decimals)
        if v == 0:
            v = 0.0  # no "-0.0"
        return f"{v:+.{decimals}f}" if signed and v != 0 else f"{v:.{decimals}f}"

    return fmt


def _interval_pairs(columns: Sequence[str]) -> dict[int, str]:
    """Position of each "<x> 95% low" column followed by its "<x> 95% high" -> the shown header "<x> 95% CI"."""
    out = {}
    for i, column in enumerate(columns[:-1]):
        if column.endswith(CI_LOW) and columns[i + 1] == column.removesuffix(CI_LOW) + CI_HIGH:
            out[i] = column.removesuffix(CI_LOW) + CI_SHOWN
    return out


def _cells(df: pd.DataFrame, missing: str) -> tuple[list[str], list[list[str]], list[bool]]:
    """Headers, cell texts and numeric flags; an interval's low/high columns become one "[low, high]" cell."""
    formats = _formatters(df)
    headers = [str(c) for c in df.columns]
    numeric = [n for n, _ in formats]
    rows = []
    for values in df.itertuples(index=False):
        rows.append([missing if _is_missing(v) else f(v) for v, (_, f) in zip(values, formats, strict=True)])
    decimals = df.attrs.get(_DECIMALS, {})
    for i, header in sorted(_interval_pairs(headers).items(), reverse=True):
        plain = _float_formatter(decimals.get(headers[i], 1), signed=False)
        for row, values in zip(rows, df.itertuples(index=False), strict=True):
            low, high = values[i], values[i + 1]
            row[i : i + 2] = [missing if _is_missing(low) or _is_missing(high) else f"[{plain(low)}, {plain(high)}]"]
        headers[i : i + 2] = [header]
        numeric[i : i + 2] = [True]
    return headers, rows, numeric


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub pipe table; missing cells are "—", numbers right-aligned."""
    headers, rows, numeric = _cells(df, MISSING)

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    rule = "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)]) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "—": "--",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(df: pd.DataFrame) -> str:
    """A booktabs tabular (needs \\usepackage{booktabs}); missing cells are "--"."""
    headers, rows, numeric = _cells(df, MISSING)
    spec = "".join("r" if n else "l" for n in numeric)

    def line(cells: Sequence[str]) -> str:
        return " & ".join(MISSING_LATEX if c == MISSING else latex_escape(c) for c in cells) + r" \\"

    body = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", line(headers), r"\midrule"]
    body += [line(r) for r in rows]
    body += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(body) + "\n"


def to_csv(df: pd.DataFrame, path: str | os.PathLike[str] | None = None) -> str:
    """CSV text (numbers as computed, missing cells "—"); written atomically to `path` when given."""
    text = df.to_csv(index=False, na_rep=MISSING)
    if path is not None:
        from repro.atomic import write_text

        write_text(path, text)
    return text


def to_rich(df: pd.DataFrame, title: str | None = None):
    """A rich Table: numbers right-aligned and never cut, missing cells "—" (dim); headers wrap."""
    from rich import box
    from rich.table import Table

    headers, rows, numeric = _cells(df, MISSING)
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for i, (header, n) in enumerate(zip(headers, numeric, strict=True)):
        words = header.split(" ")
        widest = max([len(row[i]) for row in rows] + [len(w) for w in words])
        label = "\n".join(words) if n else header
        table.add_column(label, justify="right" if n else "left", no_wrap=True, min_width=widest)
    for row in rows:
        table.add_row(*(f"[dim]{MISSING}[/dim]" if c == MISSING else _rich_escape(c) for c in row))
    return table


def _rich_escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
