"""The bench's figure: held-out accuracy against cumulative generated tokens, one line per method.

Per step a method that draws 16 responses per prompt looks four times as cheap as it is; per generated token
(`tokens/generated`, logged by both engines; `repro.report.matched`) the methods share one axis. One panel per
backbone x prompt set; each point is a step where the runs read their accuracy (`matched.curve`: the held-out
accuracy the CPU trainer logs every few steps, else evaluated checkpoints), at the mean over seeds of the
tokens generated up to it and of the accuracy, with a band over the seeds' least to greatest accuracy. The
dotted line is the budget `repro report` compares the methods at (the smallest method's total).
"""

from __future__ import annotations

import pandas as pd

from repro.report import matched
from repro.report.figures.common import Result, backbone_order, empty_figure, panels
from repro.report.style import method_color, plot_style, sort_methods

__all__ = ["accuracy_vs_tokens"]

LEGEND_INSIDE_MAX = 5  # methods a panel's legend may list inside the axes


def accuracy_vs_tokens(eval_df: pd.DataFrame, training: pd.DataFrame) -> Result:
    title = "Accuracy against generated tokens"
    points, what = matched.curve(eval_df, training)
    if points.empty:
        message = "no held-out accuracy or evaluated checkpoint of a run that logged tokens/generated"
        return empty_figure(title, message), [message]
    missing = [
        f"{run}: no accuracy reading joins its tokens"
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
        crowded = points.groupby(["backbone", "prompt_set"])["method"].nunique().max() > LEGEND_INSIDE_MAX
        # a crowded panel's legend goes beside it, where it covers no line
        fig, axes = panels(len(cells), ncols_max=2, panel_size=(7.4 if crowded else 5.6, 3.8))
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
                ax.fill_between(line["tokens"], line["lo"], line["hi"], color=color, alpha=0.15, linewidth=0)
            ax.axvline(float(budgets[(backbone, prompt_set)]), color="0.4", linestyle=":", linewidth=0.9)
            ax.set_title(f"{backbone} ({prompt_set})")
            ax.set_xlabel("generated tokens (cumulative, mean over seeds)")
            ax.set_ylabel("held-out accuracy (%)" if what == matched.HELDOUT_WHAT else "weighted Ave@k (%)")
            if crowded:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
            else:
                ax.legend(fontsize=7, loc="best")
        fig.suptitle(f"{title}; bands: seeds' min-max; dotted: the equal-token budget", fontsize=9)
    return fig, missing
