"""The step-time family (figure 7 / Table 2): each method's wall-clock step as a cost relative to GRPO-n4's,
measured beside the paper's Table 2 (8xH100). Relative, because a CPU miniature's seconds and an 8xH100's
share no axis; where the measured backbone is not in Table 2 (every miniature), the paper's bars are its
smallest backbone's, labelled as such."""

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


def _paper_rows(reference: pd.DataFrame, backbone: str) -> tuple[pd.DataFrame, str]:
    """Table 2's rows for `backbone`, else the stand-in's, and the legend label that says which."""
    own = reference[reference["backbone"] == backbone]
    if len(own) or reference.empty:
        return own.set_index("method"), PAPER_LABEL
    return (
        reference[reference["backbone"] == paper_tables.PAPER_STAND_IN].set_index("method"),
        f"paper Table 2, {paper_tables.PAPER_STAND_IN} (8xH100)",
    )


def step_time(training: pd.DataFrame, paper: bool = True, expected: Expected | None = None) -> Result:
    """Figure 7 / Table 2: mean seconds per training step per method (step 1, with its warm-up, excluded),
    divided by GRPO-n4's on the same backbone, one panel per backbone with runs; with `paper`, Table 2's
    ratios stand beside them as hatched bars. A backbone without GRPO-n4 runs shows seconds and no paper bars
    (nothing to put them on the same axis with). Each bar is labelled with its ratio; the legend sits below
    the panel, clear of the bars."""
    _, missing = prologue(training, expected)
    title = "Step cost relative to grpo-n4"
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
        fig, axes = panels(len(backbones), ncols_max=2, panel_size=(6.4, 4.2))
        for ax, backbone in zip(axes, backbones, strict=True):
            measured = means.loc[backbone]
            base = measured.get("grpo-n4")
            ref, paper_label = _paper_rows(reference, backbone)
            if base is None:
                missing.append(f"{backbone}: no grpo-n4 runs, so bars show seconds and no paper ratios")
                ref = ref.iloc[0:0]
            methods = sort_methods(set(measured.index) | set(ref.index))
            x = {m: i for i, m in enumerate(methods)}
            width = 0.4 if len(ref) else 0.6
            offset = width / 2 if len(ref) else 0.0
            order = [m for m in methods if m in measured.index]
            heights = [float(measured[m]) / base if base else float(measured[m]) for m in order]
            bars = ax.bar(
                [x[m] - offset for m in order],
                heights,
                width=width,
                color=[method_color(m) for m in order],
                label=MEASURED_LABEL,
            )
            ax.bar_label(bars, labels=[f"{h:.2f}x" if base else f"{h:.3g}s" for h in heights], fontsize=7, padding=2)
            handles = [Patch(facecolor="#999999", label=MEASURED_LABEL)]
            if len(ref):
                porder = [m for m in methods if m in ref.index]
                pbars = ax.bar(
                    [x[m] + offset for m in porder],
                    [float(ref.loc[m, "relative_to_grpo"]) for m in porder],
                    width=width,
                    color=[method_color(m) for m in porder],
                    alpha=0.45,
                    hatch="///",
                    edgecolor=PAPER_COLOR,
                    linewidth=0.6,
                    label=paper_label,
                )
                ax.bar_label(  # grpo-n4's is 1x by definition, and would sit on the measured 1.00x
                    pbars,
                    labels=[f"{float(ref.loc[m, 'relative_to_grpo']):.2g}x" if m != "grpo-n4" else "" for m in porder],
                    fontsize=7,
                    padding=2,
                )
                handles.append(Patch(facecolor="#dddddd", hatch="///", edgecolor=PAPER_COLOR, label=paper_label))
                absent = [m for m in porder if m not in measured.index]
                if absent:
                    missing.append(f"{backbone}: paper times but no runs of {', '.join(absent)}")
            ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
            ax.set_title(backbone)
            ax.set_xlabel("method")
            ax.set_ylabel("seconds per step / grpo-n4's" if base else "seconds per step")
            ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.42), ncol=2, frameon=False)
            ax.margins(y=0.15)
        fig.suptitle(f"{title} (mean wall-clock seconds per step, step 1 excluded)")
    if paper:
        have = set(rows["backbone"])
        for b in backbone_order(set(reference["backbone"]) - have):
            if not any(line.startswith(f"backbone {b}:") for line in missing):
                missing.append(f"backbone {b}: paper Table 2 has times but there are no runs")
    return fig, missing
