"""The training-curve family: the training reward against step (figures 2 and 6), held-out accuracy
against step and the reward-entropy frontier (figure 3), each the mean over seeds with the seeds' min-max
band, and their data preparation (which reward column a run is compared on, the per-seed smoothing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from repro import catalog
from repro.errors import ReproError
from repro.report.figures.common import (
    Expected,
    Result,
    backbone_order,
    empty_figure,
    method_lines,
    moving_average,
    panels,
    prologue,
    prompt_sets,
)
from repro.report.schema import HELDOUT
from repro.report.style import plot_style

__all__ = [
    "BAND_ALPHA",
    "BAND_LABEL",
    "BAND_LEGEND",
    "DEFAULT_REWARD",
    "ENTROPY",
    "FIRST_REWARD",
    "HELDOUT",
    "HELDOUT_N",
    "LEGEND_INSIDE_MAX",
    "LEGEND_WIDTH_IN",
    "POOL_REWARD",
    "REWARD",
    "REWARD_SOURCES",
    "REWARD_VALUE",
    "heldout_curve",
    "reward_column",
    "reward_curve",
    "reward_entropy",
    "seed_bands",
]

REWARD = "critic/rewards/mean"  # the update batch's reward: for Seq and DAPO the selected/balanced batch
POOL_REWARD = "sampler/pool_reward_mean"  # the reward of every response drawn in the step
FIRST_REWARD = "sampler/first_draw_reward_mean"  # per prompt the first draw's mean reward, prompts weighted equally
REWARD_SOURCES = {"first": FIRST_REWARD, "pool": POOL_REWARD, "selected": REWARD}
DEFAULT_REWARD = "first"
REWARD_VALUE = "reward"  # the column reward_column fills, run by run, with the reward the figure compares
HELDOUT_N = "heldout/n"
BAND_LABEL = "band: min-max over seeds"
BAND_LEGEND = "line = seed mean, band = seed min-max"
BAND_ALPHA = 0.18
ENTROPY = "actor/entropy"
_METRIC_LABELS = {
    REWARD: "mean reward of the selected update batch",
    POOL_REWARD: "mean reward of all drawn responses",
    FIRST_REWARD: "mean reward of each prompt's first draw",
    "critic/score/mean": "mean training score",
    ENTROPY: "policy entropy",
}


def _method_kind(method: str) -> str | None:
    return catalog.get_method(method).kind if catalog.is_method(method) else None


def reward_column(
    training: pd.DataFrame, reward: str = DEFAULT_REWARD
) -> tuple[pd.DataFrame, str, list[str], list[str]]:
    """`training` with a REWARD_VALUE column holding, per run, the reward the figure compares.

    `reward` is "first" (per prompt the mean reward of its first draw, sized before any reward is seen, then
    averaged over prompts: the policy's pass rate, estimated alike for every method), "pool" (the mean over
    every drawn response, which weights the prompts Seq keeps sampling) or "selected" (the update batch's,
    for Seq and DAPO the selected/balanced batch). A run that never logged the chosen column (written before
    it existed) falls back to its update-batch reward only when uniform GRPO makes all three equal (it keeps
    every response of a fixed-size group); others are left out. Returns (frame, y label, notes, missing).
    """
    if reward not in REWARD_SOURCES:
        raise ReproError(f"--reward must be one of {', '.join(REWARD_SOURCES)}, got {reward!r}")
    column = REWARD_SOURCES[reward]
    frame = training.copy()
    values = (
        pd.to_numeric(frame[column], errors="coerce") if column in frame.columns else pd.Series(np.nan, frame.index)
    )
    notes: list[str] = []
    missing: list[str] = []
    if reward != "selected":
        selected = pd.to_numeric(frame[REWARD], errors="coerce") if REWARD in frame.columns else values * np.nan
        for run, rows in frame.groupby("run", sort=True).groups.items():
            if values.loc[rows].notna().any():
                continue
            method = str(frame.loc[rows[0], "method"])
            if _method_kind(method) == "uniform" and selected.loc[rows].notna().any():
                values.loc[rows] = selected.loc[rows]
                notes.append(f"{run}: no {column}; {REWARD} drawn, equal by construction (uniform GRPO)")
            else:
                missing.append(f"run {run}: no {column} (its {REWARD} is the update batch's, not the policy's)")
    frame[REWARD_VALUE] = values
    return frame, _METRIC_LABELS[column], notes, missing


def seed_bands(training: pd.DataFrame, columns: Sequence[str], window: int = 1) -> pd.DataFrame:
    """Per backbone x method x prompt set x step, for each column: the mean over seeds (`<c>`), the least
    and greatest seed (`<c>:lo`, `<c>:hi`) and the number of seeds (`seeds`).

    Each run is first reduced to the steps where every column was logged and smoothed with the trailing
    `window`-step moving average; the spread is then taken across those smoothed seed curves, so the band
    shows how far apart the seeds' curves are, not the step-to-step noise of one seed.
    """
    keys = ["backbone", "method", "prompt_set", "step"]
    cols = list(columns)
    data = training[["run", *keys, *cols]].copy()
    for c in cols:
        data[c] = pd.to_numeric(data[c], errors="coerce")
    data = data.dropna(subset=cols).sort_values(["run", "step"])
    for c in cols:
        data[c] = data.groupby("run", sort=False)[c].transform(lambda s: moving_average(s, window))
    grouped = data.groupby(keys, as_index=False, sort=True)
    out = grouped[cols].mean()
    for c in cols:
        out[f"{c}:lo"] = grouped[c].min()[c].to_numpy()
        out[f"{c}:hi"] = grouped[c].max()[c].to_numpy()
    out["seeds"] = grouped["run"].nunique()["run"].to_numpy()
    return out


def _note(fig: Figure, lines: Sequence[str]) -> None:
    """Small print under the panels: what the band is and any per-run substitution the figure made."""
    if lines:
        fig.supxlabel("\n".join(lines), fontsize=6.5)  # a super-label, so the constrained layout makes room


def _band_note(means: pd.DataFrame) -> str:
    most = int(means["seeds"].max()) if len(means) else 0
    if most > 1:
        return f"line: mean over seeds (up to {most}); {BAND_LABEL}"
    return "one seed per line: no band"


LEGEND_INSIDE_MAX = 6  # more entries than this go beside the panel, where they cannot hide a curve
LEGEND_WIDTH_IN = 1.8  # what a legend beside the panels adds to the figure's width


def _curve_legend(ax, seeds: int) -> None:
    """The legend of a training-curve panel: inside where it fits, else beside the panel (a full grid has
    ten method x prompt-set lines, whose legend would cover them)."""
    title = BAND_LEGEND if seeds > 1 else None
    if len(ax.get_legend_handles_labels()[1]) > LEGEND_INSIDE_MAX:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, title=title, title_fontsize=7)
        fig = ax.get_figure()
        if not getattr(fig, "_repro_legend_room", False):  # once per figure: room for the legend column
            width, height = fig.get_size_inches()
            fig.set_size_inches(width + LEGEND_WIDTH_IN, height)
            fig._repro_legend_room = True
    else:
        ax.legend(loc="best", title=title, title_fontsize=7)


def _draw_band(ax, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, seeds: np.ndarray, color: str, label: str) -> None:
    """The seed spread as a translucent PolyCollection behind the mean line (only where >1 seed)."""
    if seeds.size and int(seeds.max()) > 1:
        ax.fill_between(x, lo, hi, color=color, alpha=BAND_ALPHA, linewidth=0, label=f"_{label} {BAND_LABEL}")


def _curve_panels(means: pd.DataFrame) -> tuple[Figure, list[tuple[Any, str, pd.DataFrame, list]]]:
    """The figure with one panel per backbone, and per panel (axes, backbone, its rows, its method x
    prompt-set lines with their styles): what every training-curve figure draws into."""
    backbones = backbone_order(means["backbone"])
    sets = prompt_sets(means)
    fig, axes = panels(len(backbones))
    rows = []
    for ax, backbone in zip(axes, backbones, strict=True):
        part = means[means["backbone"] == backbone]
        rows.append((ax, backbone, part, list(method_lines(part, sets[backbone], "step"))))
    return fig, rows


def _step_curves(
    means: pd.DataFrame, column: str, ylabel: str, title: str, percent: bool = False, marker: str | None = None
) -> Figure:
    """One panel per backbone, one mean line + seed band per method x prompt set, against step."""
    scale = 100.0 if percent else 1.0
    fig, rows = _curve_panels(means)
    for ax, backbone, part, lines in rows:
        for line, style in lines:
            x = line["step"].to_numpy()
            lo, hi = line[f"{column}:lo"].to_numpy() * scale, line[f"{column}:hi"].to_numpy() * scale
            _draw_band(ax, x, lo, hi, line["seeds"].to_numpy(), style["color"], style["label"])
            ax.plot(x, line[column].to_numpy() * scale, marker=marker, markersize=3.5, **style)
        ax.set_title(backbone)
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        _curve_legend(ax, int(part["seeds"].max()))
    fig.suptitle(title)
    return fig


def reward_curve(
    training: pd.DataFrame,
    reward: str = DEFAULT_REWARD,
    window: int = 20,
    expected: Expected | None = None,
    metric: str | None = None,
) -> Result:
    """Figures 2 and 6: the training reward against step, a trailing `window`-step moving average, one
    panel per backbone; one line per method x prompt set (the mean over seeds) with the seeds' min-max band.

    By default (`reward="first"`) the mean over prompts of each prompt's first draw, which compares methods
    like with like; `reward="pool"` draws the mean over every drawn response and `reward="selected"` the
    update batch's reward (for Seq and DAPO the selected batch, higher or more balanced by design), each
    labelled as such. `metric` draws any other logged column instead.
    """
    window, missing = prologue(training, expected, window=window)
    notes: list[str] = []
    if metric is None:
        frame, ylabel, notes, lacking = reward_column(training, reward)
        missing += lacking
        column = REWARD_VALUE
    else:
        if metric not in training.columns:
            title = f"{metric} against step"
            return empty_figure(title, f"no run logged {metric!r}"), [f"no run logged {metric!r}", *missing]
        frame, column, ylabel = training, metric, _METRIC_LABELS.get(metric, metric)
    title = f"{ylabel.capitalize()} against step ({window}-step moving average)"
    with plot_style():
        means = seed_bands(frame, [column], window)
        missing += _absent_metric(training, means, ylabel if metric is None else metric)
        if means.empty:
            return empty_figure(title, f"no values of {ylabel}"), missing
        fig = _step_curves(means, column, f"{ylabel}\n({window}-step moving average)", title)
        _note(fig, [_band_note(means), *notes])
    return fig, sorted(set(missing), key=missing.index)


def heldout_curve(training: pd.DataFrame, window: int = 1, expected: Expected | None = None) -> Result:
    """Held-out accuracy (percent) against step: the CPU trainer's `heldout/accuracy`, scored every
    `eval_every` steps on problems it never trains on (repro.local.heldout); one panel per backbone, the
    mean over seeds with the seeds' min-max band, no smoothing by default (the points are sparse)."""
    window, missing = prologue(training, expected, window=window)
    title = "Held-out accuracy against step"
    if HELDOUT not in training.columns:
        note = f"no run logged {HELDOUT!r} (a CPU run with eval_every > 0 does)"
        return empty_figure(title, note), [note, *missing]
    with plot_style():
        means = seed_bands(training, [HELDOUT], window)
        missing += _absent_metric(training, means, HELDOUT)
        if means.empty:
            return empty_figure(title, f"no values of {HELDOUT!r}"), missing
        size = ""
        if HELDOUT_N in training.columns:
            counts = sorted({int(v) for v in pd.to_numeric(training[HELDOUT_N], errors="coerce").dropna()})
            size = f", {'/'.join(map(str, counts))} responses per evaluation" if counts else ""
        smoothed = f" ({window}-point moving average)" if window > 1 else ""
        fig = _step_curves(means, HELDOUT, f"held-out accuracy (%){smoothed}", title + size, percent=True, marker="o")
        _note(fig, [_band_note(means)])
    return fig, missing


def _absent_metric(training: pd.DataFrame, means: pd.DataFrame, *metrics: str) -> list[str]:
    """Backbone x method x prompt-set cells that have runs but no values of `metrics`."""
    cells = training[["backbone", "method", "prompt_set"]].drop_duplicates()
    have = {tuple(r) for r in means[["backbone", "method", "prompt_set"]].drop_duplicates().itertuples(index=False)}
    out = []
    for b, m, p in cells.itertuples(index=False):
        if (b, m, p) not in have:
            out.append(f"{b} {m} ({p}): no values of {', '.join(metrics)}")
    return sorted(out)


def reward_entropy(
    training: pd.DataFrame,
    window: int = 20,
    reward: str = DEFAULT_REWARD,
    entropy: str = ENTROPY,
    expected: Expected | None = None,
) -> Result:
    """Figure 3, the reward-entropy frontier: smoothed reward (y) against smoothed policy entropy (x).

    `reward` is "first" (each prompt's first draw, the default), "pool" (every drawn response) or
    "selected" (the update batch), as in `reward_curve`. Each seed is smoothed with the same trailing window
    over the steps where it logged both; the line is the mean over seeds, the band the seeds' min-max reward
    along it, and a dot marks the last step (its error bars: the seeds' min-max of both), so the direction of
    training is readable.
    """
    window, missing = prologue(training, expected, window=window)
    title = "Reward-entropy frontier"
    if entropy not in training.columns:
        note = f"no run logged {entropy!r}"
        return empty_figure(title, note), [note, *missing]
    frame, ylabel, notes, lacking = reward_column(training, reward)
    missing += lacking
    with plot_style():
        means = seed_bands(frame, [REWARD_VALUE, entropy], window)
        missing += _absent_metric(training, means, ylabel, entropy)
        if means.empty:
            return empty_figure(title, "no step logged both reward and entropy"), missing
        fig, rows = _curve_panels(means)
        for ax, backbone, part, lines in rows:
            for line, style in lines:
                x, y = line[entropy].to_numpy(), line[REWARD_VALUE].to_numpy()
                lo, hi = line[f"{REWARD_VALUE}:lo"].to_numpy(), line[f"{REWARD_VALUE}:hi"].to_numpy()
                seeds = line["seeds"].to_numpy()
                _draw_band(ax, x, lo, hi, seeds, style["color"], style["label"])
                ax.plot(x, y, marker="o", markersize=3.5, markevery=[len(x) - 1], **style)
                if int(seeds[-1]) > 1:
                    xerr = [[x[-1] - line[f"{entropy}:lo"].iloc[-1]], [line[f"{entropy}:hi"].iloc[-1] - x[-1]]]
                    yerr = [[y[-1] - lo[-1]], [hi[-1] - y[-1]]]
                    ax.errorbar(
                        x[-1:],
                        y[-1:],
                        xerr=xerr,
                        yerr=yerr,
                        color=style["color"],
                        linewidth=0.8,
                        capsize=2,
                        label=f"_{style['label']} last-step spread",
                    )
            ax.set_title(backbone)
            ax.set_xlabel(f"{_METRIC_LABELS.get(entropy, entropy)} ({window}-step moving average)")
            ax.set_ylabel(f"{ylabel}\n({window}-step moving average)")
            _curve_legend(ax, int(part["seeds"].max()))
        fig.suptitle(f"{title}: {ylabel} against policy entropy (dot = last step)")
        _note(fig, [_band_note(means), *notes])
    return fig, missing
