"""The step-time family (figure 7 / Table 2): mean wall-clock seconds per training step per method, as
the cost relative to GRPO-n4, beside the paper's Table 2 seconds."""

from __future__ import annotations

import pandas as pd
from matplotlib.patches import Patch

from repro import paper as paper_tables
from repro.report.figures.common import Expected, Result, backbone_order, empty_figure, panels, prologue
from repro.report.style import PAPER_COLOR, method_color, plot_style, sort_methods

__all__ = ["MEASURED_LABEL", "PAPER_LABEL", "STEP_TIME", "step_time"]

STEP_TIME = "timing_s/step"
MEASURED_LABEL = "this reproduction"
PAPER_LABEL = "paper Table 2 (8xH100)"


def step_time(training: pd.DataFrame, paper: bool = True, expected: Expected | None = None) -> Result:
    """Figure 7 / Table 2: mean seconds per training step per method (step 1, with its warm-up, excluded).

    One panel per backbone with runs; bars are annotated with the cost relative to GRPO-n4 on the same
    backbone. With `paper`, the paper's Table 2 seconds stand beside them as hatched bars, annotated with
    the paper's ratio. The y axis turns logarithmic when the bars span more than 20x (a CPU miniature
    beside 8xH100 seconds), so both stay readable; the ratios are what compares.
    """
    _, missing = prologue(training, expected)
    title = "Wall-clock seconds per training step"
    if STEP_TIME not in training.columns:
        return empty_figure(title, f"no run logged {STEP_TIME!r}"), [f"no run logged {STEP_TIME!r}", *missing]
    reference = paper_tables.step_times() if paper else pd.DataFrame(columns=["backbone", "method"])
    with plot_style():
        rows = training[pd.to_numeric(training["step"], errors="coerce") != 1].copy()
        rows[STEP_TIME] = pd.to_numeric(rows[STEP_TIME], errors="coerce")
        rows = rows.dropna(subset=[STEP_TIME])
        cells = training[["backbone", "method"]].drop_duplicates()
        timed = {(b, m) for b, m in zip(rows["backbone"], rows["method"], strict=True)}
        for b, m in cells.itertuples(index=False):
            if (b, m) not in timed:
                missing.append(f"{b} {m}: no {STEP_TIME} after step 1")
        if rows.empty:
            return empty_figure(title, "no step time after step 1"), missing
        means = rows.groupby(["backbone", "method"])[STEP_TIME].mean()
        backbones = backbone_order(rows["backbone"])
        fig, axes = panels(len(backbones), ncols_max=2, panel_size=(5.6, 3.6))
        for ax, backbone in zip(axes, backbones, strict=True):
            measured = means.loc[backbone]
            ref = reference[reference["backbone"] == backbone].set_index("method")
            methods = sort_methods(set(measured.index) | set(ref.index))
            x = {m: i for i, m in enumerate(methods)}
            width = 0.4 if len(ref) else 0.6
            offset = width / 2 if len(ref) else 0.0
            base = measured.get("grpo-n4")
            if base is None:
                missing.append(f"{backbone}: no grpo-n4 runs, so bars show seconds instead of relative cost")
            order = [m for m in methods if m in measured.index]
            bars = ax.bar(
                [x[m] - offset for m in order],
                [float(measured[m]) for m in order],
                width=width,
                color=[method_color(m) for m in order],
                label=MEASURED_LABEL,
            )
            notes = [f"{measured[m] / base:.2f}x" if base else f"{measured[m]:.3g}s" for m in order]
            ax.bar_label(bars, labels=notes, fontsize=7, padding=2)
            heights = [float(measured[m]) for m in order]
            if len(ref):
                porder = [m for m in methods if m in ref.index]
                pbars = ax.bar(
                    [x[m] + offset for m in porder],
                    [float(ref.loc[m, "seconds_per_step"]) for m in porder],
                    width=width,
                    color=[method_color(m) for m in porder],
                    alpha=0.45,
                    hatch="///",
                    edgecolor=PAPER_COLOR,
                    linewidth=0.6,
                    label=PAPER_LABEL,
                )
                ax.bar_label(
                    pbars,
                    labels=[f"{float(ref.loc[m, 'relative_to_grpo']):.2g}x" for m in porder],
                    fontsize=7,
                    padding=2,
                )
                heights += [float(ref.loc[m, "seconds_per_step"]) for m in porder]
                absent = [m for m in porder if m not in measured.index]
                if absent:
                    missing.append(f"{backbone}: paper times but no runs of {', '.join(absent)}")
            positive = [h for h in heights if h > 0]
            if positive and max(positive) / min(positive) > 20:
                ax.set_yscale("log")
            ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
            ax.set_title(backbone)
            ax.set_xlabel("method")
            ax.set_ylabel("seconds per step (mean, step 1 excluded)")
            handles = [Patch(facecolor="#999999", label=MEASURED_LABEL)]
            if len(ref):
                handles.append(Patch(facecolor="#dddddd", hatch="///", edgecolor=PAPER_COLOR, label=PAPER_LABEL))
            ax.legend(handles=handles, loc="upper left")
            ax.margins(y=0.15)
        fig.suptitle(f"{title} (labels: cost relative to grpo-n4)")
    if paper:
        have = set(rows["backbone"])
        for b in backbone_order(set(reference["backbone"]) - have):
            if not any(line.startswith(f"backbone {b}:") for line in missing):
                missing.append(f"backbone {b}: paper Table 2 has times but there are no runs")
    return fig, missing
