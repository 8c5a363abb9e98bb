"""The bench's figure: held-out accuracy against cumulative generated tokens, one line per method.

Per step a method that draws 16 responses per prompt looks four times as cheap as it is; per generated token
(`tokens/generated`, logged by both engines; `repro.report.matched`) the methods share one axis. One panel per
backbone x prompt set; each point is an evaluated checkpoint, at the mean over seeds of the tokens generated
up to it and of the weighted Ave@k, with a bar over the seeds' least to greatest accuracy. The dotted line
is the budget `repro report` compares the methods at (the smallest method's total).
"""

from __future__ import annotations

import pandas as pd

from repro.report import matched
from repro.report.figures.common import Result, backbone_order, empty_figure, panels
from repro.report.style import method_color, plot_style, sort_methods

__all__ = ["accuracy_vs_tokens"]


def accuracy_vs_tokens(eval_df: pd.DataFrame, training: pd.DataFrame) -> Result:
    title = "Held-out accuracy against generated tokens"
    points = matched.accuracy_by_tokens(eval_df, training)
    if points.empty:
        message = "no evaluated checkpoint of a run that logged tokens/generated"
        return empty_figure(title, message), [message]
    missing = [
        f"{run}: no evaluated checkpoint joins its tokens"
        for run in sorted(set(training["run"]) - set(points["run"]))
        if run in set(eval_df["run"])
    ]
    cells = [
        (b, p)
        for b in backbone_order(points["backbone"])
        for p in sorted(points[points["backbone"] == b]["prompt_set"].unique())
    ]
    budgets = matched.at_equal_tokens(points).groupby(["backbone", "prompt_set"])["budget_tokens"].first()
    with plot_style():
        fig, axes = panels(len(cells), ncols_max=2, panel_size=(5.6, 3.8))
        for ax, (backbone, prompt_set) in zip(axes, cells, strict=True):
            cell = points[(points["backbone"] == backbone) & (points["prompt_set"] == prompt_set)]
            for method in sort_methods(cell["method"].unique()):
                by_step = cell[cell["method"] == method].groupby("step")
                line = pd.DataFrame(
                    {
                        "tokens": by_step["tokens"].mean(),
                        "ave": by_step["ave"].mean(),
                        "lo": by_step["ave"].min(),
                        "hi": by_step["ave"].max(),
                        "seeds": by_step["run"].nunique(),
                    }
                )
                color = method_color(method)
                label = f"{method} ({int(line['seeds'].max())} seeds)"
                ax.plot(line["tokens"], line["ave"], marker="o", markersize=3, color=color, label=label)
                ax.vlines(line["tokens"], line["lo"], line["hi"], color=color, linewidth=0.8, alpha=0.6)
            ax.axvline(float(budgets[(backbone, prompt_set)]), color="0.4", linestyle=":", linewidth=0.9)
            ax.set_title(f"{backbone} ({prompt_set})")
            ax.set_xlabel("generated tokens (cumulative, mean over seeds)")
            ax.set_ylabel("weighted Ave@k (%)")
            ax.legend(fontsize=7, loc="best")
        fig.suptitle(f"{title}; bars: seeds' min-max; dotted: the equal-token budget", fontsize=9)
    return fig, missing
