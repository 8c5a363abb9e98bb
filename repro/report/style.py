"""One look for every figure: rcParams in a context manager, a fixed colour per method, atomic saving.

Figures are built as plain `matplotlib.figure.Figure` objects attached to an Agg canvas, never through
pyplot: rendering is headless whatever backend the process has selected (no display needed, and an
interactive session that imports this module keeps its own backend and figures), no global figure
registry fills up, and a figure can be saved twice.
Colours are fixed per method key (not taken from the order methods happen to appear in), so GRPO-n4 is
the same blue in every figure of every report.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from repro.atomic import write_with

__all__ = [
    "DPI",
    "FORMATS",
    "METHOD_COLORS",
    "METHOD_ORDER",
    "PAPER_COLOR",
    "RC_PARAMS",
    "method_color",
    "new_figure",
    "plot_style",
    "save",
    "sort_methods",
]

# The catalog's method keys in the order legends and bars list them. GRPO family in blues (darker =
# fewer samples), DAPO purple, Seq in warm colours (streamed variants a lighter shade), Est green (as released
# a lighter shade).
METHOD_ORDER: tuple[str, ...] = (
    "grpo-n4",
    "grpo-n8",
    "grpo-n16",
    "dapo",
    "seq-pos",
    "seq-balance",
    "est",
    "est-released",
    "seq-pos-stream",
    "seq-balance-stream",
    "seq-pos-exit",
    "seq-balance-exit",
    "seq-balance-exit-stream",
    "seq-balance-exit-first",
    "pods-16-4",
    "knapsack",
    "greso",
)
METHOD_COLORS: dict[str, str] = {
    "grpo-n4": "#1f4e96",
    "grpo-n8": "#3b82c4",
    "grpo-n16": "#8fbde6",
    "dapo": "#7b4ea3",
    "seq-pos": "#e6820e",
    "seq-balance": "#c8283c",
    "est": "#2e9e4f",
    "est-released": "#8fd19e",
    "seq-pos-stream": "#f5bd6b",
    "seq-balance-stream": "#f08a9a",
    "seq-pos-exit": "#a65c00",  # the early exit (issue 46): darker shades of Seq's, the biased cut grey-red
    "seq-balance-exit": "#7a1020",
    "seq-balance-exit-stream": "#b34d5e",
    "seq-balance-exit-first": "#9a7b80",
    "pods-16-4": "#17becf",  # the literature's methods (the bench): colours no paper method uses
    "knapsack": "#8c564b",
    "greso": "#bcbd22",
}
# Methods outside the catalog get a colour from this palette chosen by a hash of the key: stable across
# figures and sessions (Python's hash() is salted per process, so it is not used).
_FALLBACK = ("#8c564b", "#17becf", "#bcbd22", "#7f7f7f", "#e377c2", "#9467bd", "#d62728", "#2ca02c")
PAPER_COLOR = "#444444"  # the paper's reference points and the edge of its hatched bars

DPI = 150
FORMATS = ("png", "pdf")

RC_PARAMS: dict[str, object] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "axes.grid": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "lines.linewidth": 1.6,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "figure.dpi": 100,
    "figure.titlesize": 11,
    "savefig.dpi": DPI,
    "pdf.fonttype": 42,  # TrueType in PDFs: editable text, accepted by paper submission systems
}


@contextlib.contextmanager
def plot_style() -> Iterator[None]:
    """Apply the house rcParams for the figures built inside the block (artists read them on creation)."""
    with matplotlib.rc_context(RC_PARAMS):
        yield


def method_color(method: str) -> str:
    """The fixed colour of a method key; unknown keys get a stable colour from a fallback palette."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    from repro.catalog import ASYNC_SUFFIX

    base = method.removesuffix(ASYNC_SUFFIX)
    if base != method and base in METHOD_COLORS:  # an async variant: its method's colour, darker
        from matplotlib.colors import to_hex, to_rgb

        return to_hex(tuple(0.6 * c for c in to_rgb(METHOD_COLORS[base])))
    digest = hashlib.sha1(method.encode()).digest()
    return _FALLBACK[digest[0] % len(_FALLBACK)]


def sort_methods(methods) -> list[str]:
    """Method keys in the paper's order, unknown keys after them alphabetically."""
    rank = {m: i for i, m in enumerate(METHOD_ORDER)}
    return sorted(set(methods), key=lambda m: (rank.get(m, len(rank)), m))


def new_figure(nrows: int = 1, ncols: int = 1, *, panel_size: tuple[float, float] = (4.6, 3.4), **kwargs):
    """A Figure with an Agg canvas and a grid of axes (always a 2-D array), sized per panel."""
    fig = Figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kwargs)
    return fig, axes


def _base(out_base: str | os.PathLike[str]) -> Path:
    path = Path(out_base)
    if path.suffix.lower() in {f".{f}" for f in FORMATS}:
        path = path.with_suffix("")  # "fig.png" means "fig"; with_suffix is not used on names like "qwen2.5"
    return path


METADATA = {"png": {}, "pdf": {"CreationDate": None}}  # a dated PDF differs byte for byte on every save


def save(fig: Figure, out_base: str | os.PathLike[str]) -> list[Path]:
    """Write `<out_base>.png` (150 dpi) and `<out_base>.pdf`, each atomically (temp file + os.replace).

    A crash mid-write leaves the previous figure (or none), never a truncated file; the temp files are
    hidden siblings of the targets and are removed on failure. The PDF carries no creation date, so the same
    results give the same bytes (figures can be compared by hash across runs and refactors).
    """
    base = _base(out_base)
    base.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in FORMATS:
        target = base.parent / f"{base.name}.{fmt}"

        def draw(handle, fmt=fmt):
            with plot_style():
                fig.savefig(handle, format=fmt, dpi=DPI, bbox_inches="tight", metadata=METADATA[fmt])

        write_with(target, draw)
        written.append(target)
    return written
