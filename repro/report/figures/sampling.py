"""The sampling family (figure 5): the sampling dynamics of the sequential (Seq) methods, seeds averaged
step by step, and the columns the Seq sampler logs for it."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.ticker import MaxNLocator

from repro import catalog
from repro.report.figures.common import (
    Expected,
    Result,
    backbone_order,
    empty_figure,
    line_label,
    line_order,
    line_style,
    moving_average,
    prologue,
    prompt_sets,
)
from repro.report.style import method_color, new_figure, plot_style

__all__ = ["ADDITIONAL", "MISSING_NEG", "MISSING_POS", "RESOLVED_2", "SAMPLING_PANELS", "sampling", "seed_mean"]

ADDITIONAL = "sampler/additional_samples"
MISSING_POS = "sampler/unresolved_missing_pos"
MISSING_NEG = "sampler/unresolved_missing_neg"
RESOLVED_2 = "sampler/resolved_within_2_rounds"
# Figure 5's three panels: (title, y label, [(column, line style, legend text)])
SAMPLING_PANELS = (
    ("Additional samples per step", "responses beyond the first round", [(ADDITIONAL, "-", None)]),
    (
        "Prompts still active after all rounds",
        "prompts per step",
        [(MISSING_POS, "-", "missing positive"), (MISSING_NEG, "--", "missing negative")],
    ),
    ("Prompts resolved within 2 rounds", "prompts per step", [(RESOLVED_2, "-", None)]),
)


def seed_mean(training: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Per backbone x method x prompt set x step: the mean over seeds of each column (NaNs skipped)."""
    keys = ["backbone", "method", "prompt_set", "step"]
    data = training[keys + list(columns)].copy()
    for c in columns:
        data[c] = pd.to_numeric(data[c], errors="coerce")
    return data.groupby(keys, as_index=False, sort=True)[list(columns)].mean()


def _is_seq(method: str, frame: pd.DataFrame) -> bool:
    if catalog.is_method(method):
        return catalog.get_method(method).kind == "seq"
    cols = [c for c in (ADDITIONAL, MISSING_POS, MISSING_NEG, RESOLVED_2) if c in frame.columns]
    return bool(cols) and frame.loc[frame["method"] == method, cols].notna().any().any()


def sampling(training: pd.DataFrame, window: int = 20, expected: Expected | None = None) -> Result:
    """Figure 5, the sampling dynamics of the sequential (Seq) methods, one row of three panels per backbone:
    additional samples per step; prompts still active after all rounds, split into missing-positive
    (solid) and missing-negative (dashed); prompts meeting the exit rule within 2 rounds.

    One line per Seq method x prompt set (seeds averaged, `window`-step moving average); other methods
    have no rounds and are left out; Seq methods lacking a column are listed in `missing`.
    """
    window, missing = prologue(
        training, expected, what="Seq runs", window=window, keep=lambda method: _is_seq(method, training)
    )
    title = "Sampling dynamics of the sequential methods"
    columns = [c for _, _, lines in SAMPLING_PANELS for c, _, _ in lines]
    seq = training[[_is_seq(str(m), training) for m in training["method"]]]
    present = [c for c in columns if c in seq.columns]
    if seq.empty or not present:
        note = "no Seq-method runs" if seq.empty else "no Seq run logged the sampler columns"
        return empty_figure(title, note), [note, *missing]
    with plot_style():
        means = seed_mean(seq, present)
        for b, m, p in seq[["backbone", "method", "prompt_set"]].drop_duplicates().itertuples(index=False):
            cell = means[(means["backbone"] == b) & (means["method"] == m) & (means["prompt_set"] == p)]
            lacking = [c for c in columns if c not in cell.columns or cell[c].isna().all()]
            if lacking:
                missing.append(f"{b} {m} ({p}): no values of {', '.join(lacking)}")
        backbones = backbone_order(means["backbone"])
        sets = prompt_sets(means)
        fig, axes = new_figure(len(backbones), len(SAMPLING_PANELS), panel_size=(4.4, 3.3))
        for row, backbone in zip(axes, backbones, strict=True):
            part = means[means["backbone"] == backbone]
            for ax, (panel_title, ylabel, lines) in zip(row, SAMPLING_PANELS, strict=True):
                split = len(lines) > 1  # line style tells the columns apart; prompt sets get markers
                for method, prompt_set in line_order(part):
                    cell = part[(part["method"] == method) & (part["prompt_set"] == prompt_set)].sort_values("step")
                    label = line_label(method, prompt_set, sets[backbone])
                    for i, (column, style, _) in enumerate(lines):
                        values = cell[["step", column]].dropna() if column in cell.columns else cell.iloc[:0]
                        if values.empty:
                            continue
                        marker = None
                        if split and len(sets[backbone]) > 1 and sets[backbone].index(prompt_set):
                            marker = "^sdv"[(sets[backbone].index(prompt_set) - 1) % 4]
                        ax.plot(
                            values["step"].to_numpy(),
                            moving_average(values[column], window).to_numpy(),
                            color=method_color(method),
                            linestyle=style if split else line_style(prompt_set, sets[backbone]),
                            marker=marker,
                            markersize=3,
                            markevery=max(1, len(values) // 10),
                            label=label if i == 0 else f"_{label} {column}",
                        )
                if split:
                    key = ", ".join(f"{'solid' if s == '-' else 'dashed'}: {text}" for _, s, text in lines)
                    panel_title = f"{panel_title}\n({key})"
                ax.set_title(f"{backbone}: {panel_title}")
                ax.set_xlabel("training step")
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set_ylabel(f"{ylabel} ({window}-step avg.)")
                ax.legend(loc="best")
        fig.suptitle(f"{title} ({window}-step moving average)")
    return fig, missing
