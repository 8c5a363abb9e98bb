"""Ave@k against cumulative generated tokens, from evaluated checkpoints only (issue 45).

One panel per backbone x prompt set, one line per method: each seed's curve is its run's evaluated checkpoints
and then its compute-matched long run's (`repro.report.equal_tokens.curve_points`), taken onto a common token
grid by linear interpolation between its own checkpoints (never beyond them), so seeds whose checkpoints fall
at different token counts share one mean line and one band (the seeds' least to greatest). A method whose
seeds share no span of tokens (one checkpoint in some seed) is a point, each seed's last checkpoint at the
mean over seeds, with a bar over them. The readings `repro report`
compares at equal tokens are marked (diamonds: a long run's, circles: a final checkpoint's), the mean over
seeds. `ave_vs_tokens` returns, besides the figure, the points it drew, so a test can check them against the
evaluation records.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from repro.report import equal_tokens
from repro.report.figures.common import backbone_order, empty_figure, panels
from repro.report.style import method_color, plot_style, sort_methods

__all__ = ["ave_vs_tokens", "method_curve"]

GRID = 40  # points of the common token grid a method's seeds are interpolated onto


def method_curve(points: pd.DataFrame) -> pd.DataFrame:
    """One method's seeds (`curve_points` rows) on a common grid: tokens, ave (mean), lo, hi (seeds' min, max),
    seeds. The grid spans the tokens every seed covers; where they share no span (a seed with one checkpoint),
    one row: each seed's last checkpoint, at the means."""
    curves = [rows.sort_values("tokens") for _, rows in points.groupby("seed")]
    start = max(float(c["tokens"].iloc[0]) for c in curves)
    stop = min(float(c["tokens"].iloc[-1]) for c in curves)
    if stop <= start:
        aves = [float(c["ave"].iloc[-1]) for c in curves]
        tokens = float(np.mean([float(c["tokens"].iloc[-1]) for c in curves]))
        return pd.DataFrame(
            {"tokens": [tokens], "ave": [np.mean(aves)], "lo": [min(aves)], "hi": [max(aves)], "seeds": [len(curves)]}
        )
    grid = np.linspace(start, stop, GRID)
    values = np.array([np.interp(grid, c["tokens"].to_numpy(float), c["ave"].to_numpy(float)) for c in curves])
    return pd.DataFrame(
        {"tokens": grid, "ave": values.mean(0), "lo": values.min(0), "hi": values.max(0), "seeds": len(curves)}
    )


def ave_vs_tokens(
    tables: dict[str, pd.DataFrame], pairs: list[tuple[str, str, str]] = ()
) -> tuple[object, list[str], pd.DataFrame]:
    """(figure, missing, the checkpoints drawn): `pairs` are the (method, reference, prompt set) comparisons
    whose equal-token readings are marked."""
    title = "Weighted Ave@k against generated tokens (evaluated checkpoints)"
    points = equal_tokens.curve_points(tables)
    if points.empty:
        message = "no evaluated checkpoint of a run that logged tokens/generated"
        return empty_figure(title, message), [message], points
    cells = [
        (b, p)
        for b in backbone_order(points["backbone"])
        for p in sorted(points[points["backbone"] == b]["prompt_set"].unique())
    ]
    missing: list[str] = []
    with plot_style():
        fig, axes = panels(len(cells), ncols_max=2, panel_size=(7.4, 4.0))
        for ax, (backbone, prompt_set) in zip(axes, cells, strict=True):
            cell = points[(points["backbone"] == backbone) & (points["prompt_set"] == prompt_set)]
            for method in sort_methods(cell["method"].unique()):
                line = method_curve(cell[cell["method"] == method])
                color = method_color(method)
                label = f"{method} ({int(line['seeds'].max())} seeds)"
                if len(line) == 1:
                    ax.errorbar(
                        line["tokens"],
                        line["ave"],
                        yerr=[line["ave"] - line["lo"], line["hi"] - line["ave"]],
                        fmt="o",
                        markersize=4,
                        color=color,
                        capsize=2,
                        label=label,
                    )
                else:
                    ax.plot(line["tokens"], line["ave"], color=color, label=label)
                    ax.fill_between(line["tokens"], line["lo"], line["hi"], color=color, alpha=0.15, linewidth=0)
            for method, reference, where in pairs:
                if where != prompt_set:
                    continue
                found, lost = equal_tokens.seed_pairs(tables, backbone, prompt_set, method, reference)
                missing += [f"{backbone}/{prompt_set} {method} vs {reference}: {line}" for line in lost]
                for name, side in ((method, [p.method for p in found]), (reference, [p.reference for p in found])):
                    if side:
                        ax.plot(
                            np.mean([r.tokens for r in side]),
                            np.mean([r.ave for r in side]),
                            marker="D" if any(r.long_run for r in side) else "o",
                            markersize=6,
                            markerfacecolor="none",
                            markeredgecolor=method_color(name),
                            linestyle="",
                        )
            ax.set_title(f"{backbone} ({prompt_set})")
            ax.set_xlabel("generated tokens (cumulative)")
            ax.set_ylabel("weighted Ave@k (%)")
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        fig.suptitle(
            f"{title}; bands: seeds' min-max; open markers: the equal-token readings (diamond: a long run's)",
            fontsize=9,
        )
    return fig, missing, points
