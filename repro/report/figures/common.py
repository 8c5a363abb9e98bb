"""What every figure family uses: the checks a figure starts with, the expected grid and what it lacks,
panel and line order, the colour/line style/label of a method x prompt set, empty and panelled figures,
and the moving average of every smoothed curve."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from repro import catalog
from repro.errors import ReproError
from repro.report.schema import RUN_KEYS, require_columns
from repro.report.style import method_color, new_figure, sort_methods

__all__ = [
    "Expected",
    "Result",
    "backbone_order",
    "empty_figure",
    "line_label",
    "line_order",
    "line_style",
    "method_lines",
    "moving_average",
    "panels",
    "prologue",
    "prompt_sets",
]

Expected = Mapping[str, Iterable[str]]
Result = tuple[Figure, list[str]]

_LINESTYLES = ("-", "--", ":", "-.")


def backbone_order(backbones: Iterable[str]) -> list[str]:
    """Catalog order, then backbones the catalog does not know, alphabetically."""
    rank = {b: i for i, b in enumerate(catalog.backbones())}
    return sorted(set(backbones), key=lambda b: (rank.get(b, len(rank)), b))


def _paper_grid() -> dict[str, tuple[str, ...]]:
    return {key: b.paper_methods for key, b in catalog.backbones().items() if b.paper_methods}


def _window(window: int) -> int:
    if int(window) < 1:
        raise ReproError(f"--window must be >= 1, got {window}")
    return int(window)


def _grid_missing(
    present: pd.DataFrame, expected: Expected | None, what: str, keep: Callable[[str], bool] | None = None
) -> list[str]:
    """Backbones and methods of the expected grid (only the methods `keep` accepts) that `present`
    (backbone, method rows) lacks."""
    grid = _paper_grid() if expected is None else {b: tuple(m) for b, m in expected.items()}
    if keep is not None:
        grid = {b: kept for b, ms in grid.items() if (kept := tuple(m for m in ms if keep(m)))}
    have = {(b, m) for b, m in zip(present["backbone"], present["method"], strict=True)}
    backbones = {b for b, _ in have}
    out = []
    for backbone in backbone_order(grid):
        methods = sort_methods(grid[backbone])
        if backbone not in backbones:
            out.append(f"backbone {backbone}: no {what} (expected {', '.join(methods)})")
            continue
        absent = [m for m in methods if (backbone, m) not in have]
        if absent:
            out.append(f"{backbone}: no {what} of {', '.join(absent)}")
    return out


def prologue(
    frame: pd.DataFrame,
    expected: Expected | None,
    *,
    table: str = "training",
    columns: Sequence[str] = ("step",),
    what: str = "training runs",
    window: int = 1,
    keep: Callable[[str], bool] | None = None,
) -> tuple[int, list[str]]:
    """The start every figure shares, so each refuses bad input the same way and in the same order: the
    smoothing window is checked (>= 1), then `table` must have the run keys and `columns` (else rerun
    `repro collect`), then the expected grid's absent backbones and methods become the first `missing`
    lines (`what` names the rows, `keep` narrows the grid to the methods the figure draws).

    Returns (window as an int, missing lines); a figure without a window ignores the first.
    """
    window = _window(window)
    require_columns(frame, (*RUN_KEYS, *columns), table)
    return window, _grid_missing(frame, expected, what, keep)


def prompt_sets(frame: pd.DataFrame) -> dict[str, list[str]]:
    """Prompt sets per backbone, 'standard' first."""
    out: dict[str, list[str]] = {}
    for backbone, group in frame.groupby("backbone"):
        sets = sorted(set(group["prompt_set"]), key=lambda s: (s != "standard", s))
        out[str(backbone)] = sets
    return out


def line_style(prompt_set: str, sets: Sequence[str]) -> str:
    """One line style per prompt set of the panel (solid for the first, 'standard')."""
    return _LINESTYLES[list(sets).index(prompt_set) % len(_LINESTYLES)] if prompt_set in sets else "-"


def line_label(method: str, prompt_set: str, sets: Sequence[str]) -> str:
    """The method key, with the prompt set only when the panel holds more than one."""
    return method if len(sets) <= 1 else f"{method} ({prompt_set})"


def line_order(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """The method x prompt-set pairs of `frame`: methods in legend order, 'standard' first within each."""
    pairs = {(str(m), str(p)) for m, p in zip(frame["method"], frame["prompt_set"], strict=True)}
    rank = {m: i for i, m in enumerate(sort_methods(m for m, _ in pairs))}
    return sorted(pairs, key=lambda mp: (rank[mp[0]], mp[1] != "standard", mp[1]))


def method_lines(part: pd.DataFrame, sets: list[str], x: str) -> Iterator[tuple[pd.DataFrame, dict[str, Any]]]:
    """Each method x prompt set of one panel, sorted by `x`, with the colour, line style and label that
    every figure gives it (one colour per method, one line style per prompt set)."""
    for method, prompt_set in line_order(part):
        line = part[(part["method"] == method) & (part["prompt_set"] == prompt_set)].sort_values(x)
        style = {
            "color": method_color(method),
            "linestyle": line_style(prompt_set, sets),
            "label": line_label(method, prompt_set, sets),
        }
        yield line, style


def moving_average(values: pd.Series, window: int) -> pd.Series:
    """The trailing `window`-point moving average used by every curve (min_periods=1: no gap at the start)."""
    return values.rolling(window, min_periods=1).mean()


def empty_figure(title: str, message: str) -> Figure:
    """A one-panel figure saying why there is nothing to draw, so the CLI still writes a file."""
    fig, axes = new_figure(1, 1)
    ax = axes[0, 0]
    ax.set_title(title)
    ax.set_xlabel("—")
    ax.set_ylabel("—")
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, wrap=True)
    fig.suptitle(title)
    return fig


def panels(n: int, ncols_max: int = 3, panel_size=(4.6, 3.4)):
    """A figure with `n` visible panels, at most `ncols_max` a row; returns (figure, the n axes)."""
    ncols = min(n, ncols_max)
    nrows = math.ceil(n / ncols)
    fig, axes = new_figure(nrows, ncols, panel_size=panel_size)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]
