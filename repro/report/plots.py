"""The paper's figures from the tidy tables of `repro collect` (schema.py): each function returns
`(figure, missing)` and writes nothing; `repro.report.style.save` writes PNG + PDF.

Every function draws whatever subset of the grid exists and lists what it could not draw in `missing`
(one human-readable line each: an absent backbone, a method with no runs, a metric a run did not log),
so a half-finished grid still gives figures and the CLI can say what they lack.

Conventions shared by all figures:
- one panel per backbone (catalog order, then unknown backbones alphabetically);
- one line per method x prompt set, seeds averaged step by step; the legend shows the method key, with
  the prompt set appended only when a panel holds more than one (the paper's hard-vs-standard figure);
  the training curves (reward, held-out accuracy, reward-entropy) draw the mean over seeds with a band
  spanning the least to the greatest seed, each seed smoothed first (`seed_bands`), and say so;
- the training reward is by default the mean over prompts of each prompt's first draw
  (sampler/first_draw_reward_mean), sized before any reward is seen, so it estimates the policy's pass rate
  the same way for every method; the mean over every drawn response (sampler/pool_reward_mean, "pool")
  weights the prompts Seq keeps sampling (the hard ones), and the update batch's reward
  (critic/rewards/mean, "selected") is, for Seq and DAPO, the selected batch's and flatters them; both are
  drawn only when asked for, and labelled as such;
- a method has the same colour in every figure (style.METHOD_COLORS); prompt sets differ by line style;
- accuracies (pass@k, group shares) are drawn in percent, beside the paper's percentages;
- "expected" grids default to the paper's: for each backbone of the catalog its `paper_methods`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from repro.errors import ReproError
from repro.report.schema import RUN_KEYS, WEIGHTED_AVERAGE
from repro.report.style import PAPER_COLOR, method_color, new_figure, plot_style, sort_methods

__all__ = [
    "MEASURED_LABEL",
    "PAPER_LABEL",
    "SAMPLING_PANELS",
    "heldout_curve",
    "passk",
    "reward_column",
    "reward_curve",
    "reward_entropy",
    "sampling",
    "seed_bands",
    "share_all_correct",
    "signal_loss",
    "step_time",
]

Expected = Mapping[str, Iterable[str]]
Result = tuple[Figure, list[str]]

REWARD = "critic/rewards/mean"  # the update batch's reward: for Seq and DAPO the selected/balanced batch
POOL_REWARD = "sampler/pool_reward_mean"  # the reward of every response drawn in the step
FIRST_REWARD = "sampler/first_draw_reward_mean"  # per prompt the first draw's mean reward, prompts weighted equally
REWARD_SOURCES = {"first": FIRST_REWARD, "pool": POOL_REWARD, "selected": REWARD}
DEFAULT_REWARD = "first"
REWARD_VALUE = "reward"  # the column reward_column fills, run by run, with the reward the figure compares
HELDOUT = "heldout/accuracy"
HELDOUT_N = "heldout/n"
BAND_LABEL = "band: min-max over seeds"
BAND_LEGEND = "line = seed mean, band = seed min-max"
BAND_ALPHA = 0.18
ENTROPY = "actor/entropy"
STEP_TIME = "timing_s/step"
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
MEASURED_LABEL = "this reproduction"
PAPER_LABEL = "paper Table 2 (8xH100)"
CORRECT_THRESHOLD = 0.5  # eval scores are 0/1; a record counts as correct above this
_METRIC_LABELS = {
    REWARD: "mean reward of the selected update batch",
    POOL_REWARD: "mean reward of all drawn responses",
    FIRST_REWARD: "mean reward of each prompt's first draw",
    "critic/score/mean": "mean training score",
    ENTROPY: "policy entropy",
}
_LINESTYLES = ("-", "--", ":", "-.")
_PASS_RE = re.compile(r"pass@(\d+)$")


# ----------------------------------------------------------------------------------------------- helpers


def _backbone_order(backbones: Iterable[str]) -> list[str]:
    from repro import catalog

    rank = {b: i for i, b in enumerate(catalog.backbones())}
    return sorted(set(backbones), key=lambda b: (rank.get(b, len(rank)), b))


def _paper_grid() -> dict[str, tuple[str, ...]]:
    from repro import catalog

    return {key: b.paper_methods for key, b in catalog.backbones().items() if b.paper_methods}


def _check(frame: pd.DataFrame, table: str, columns: Iterable[str]) -> None:
    lacking = [c for c in columns if c not in frame.columns]
    if lacking:
        raise ReproError(f"the {table} table lacks column(s) {', '.join(lacking)}; rerun `repro collect`")


def _grid_missing(present: pd.DataFrame, expected: Expected | None, what: str) -> list[str]:
    """Backbones and methods of the expected grid that `present` (backbone, method rows) lacks."""
    grid = _paper_grid() if expected is None else {b: tuple(m) for b, m in expected.items()}
    have = {(b, m) for b, m in zip(present["backbone"], present["method"], strict=True)}
    backbones = {b for b, _ in have}
    out = []
    for backbone in _backbone_order(grid):
        methods = sort_methods(grid[backbone])
        if backbone not in backbones:
            out.append(f"backbone {backbone}: no {what} (expected {', '.join(methods)})")
            continue
        absent = [m for m in methods if (backbone, m) not in have]
        if absent:
            out.append(f"{backbone}: no {what} of {', '.join(absent)}")
    return out


def _prompt_sets(frame: pd.DataFrame) -> dict[str, list[str]]:
    """Prompt sets per backbone, 'standard' first."""
    out: dict[str, list[str]] = {}
    for backbone, group in frame.groupby("backbone"):
        sets = sorted(set(group["prompt_set"]), key=lambda s: (s != "standard", s))
        out[str(backbone)] = sets
    return out


def _linestyle(prompt_set: str, sets: Sequence[str]) -> str:
    return _LINESTYLES[list(sets).index(prompt_set) % len(_LINESTYLES)] if prompt_set in sets else "-"


def _label(method: str, prompt_set: str, sets: Sequence[str]) -> str:
    return method if len(sets) <= 1 else f"{method} ({prompt_set})"


def _line_order(frame: pd.DataFrame) -> list[tuple[str, str]]:
    pairs = {(str(m), str(p)) for m, p in zip(frame["method"], frame["prompt_set"], strict=True)}
    rank = {m: i for i, m in enumerate(sort_methods(m for m, _ in pairs))}
    return sorted(pairs, key=lambda mp: (rank[mp[0]], mp[1] != "standard", mp[1]))


def seed_mean(training: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Per backbone x method x prompt set x step: the mean over seeds of each column (NaNs skipped)."""
    keys = ["backbone", "method", "prompt_set", "step"]
    data = training[keys + list(columns)].copy()
    for c in columns:
        data[c] = pd.to_numeric(data[c], errors="coerce")
    return data.groupby(keys, as_index=False, sort=True)[list(columns)].mean()


def moving_average(values: pd.Series, window: int) -> pd.Series:
    """The trailing `window`-point moving average used by every curve (min_periods=1: no gap at the start)."""
    return values.rolling(window, min_periods=1).mean()


def _empty(title: str, message: str) -> Figure:
    fig, axes = new_figure(1, 1)
    ax = axes[0, 0]
    ax.set_title(title)
    ax.set_xlabel("—")
    ax.set_ylabel("—")
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, wrap=True)
    fig.suptitle(title)
    return fig


def _panels(n: int, ncols_max: int = 3, panel_size=(4.6, 3.4)):
    ncols = min(n, ncols_max)
    nrows = math.ceil(n / ncols)
    fig, axes = new_figure(nrows, ncols, panel_size=panel_size)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _window(window: int) -> int:
    if int(window) < 1:
        raise ReproError(f"--window must be >= 1, got {window}")
    return int(window)


# ----------------------------------------------------------------------------------------------- training


def _method_lines(part: pd.DataFrame, sets: list[str], x: str) -> Iterator[tuple[pd.DataFrame, dict[str, Any]]]:
    """Each method x prompt set of one panel, sorted by `x`, with the colour, line style and label that
    every figure gives it (one colour per method, one line style per prompt set)."""
    for method, prompt_set in _line_order(part):
        line = part[(part["method"] == method) & (part["prompt_set"] == prompt_set)].sort_values(x)
        style = {
            "color": method_color(method),
            "linestyle": _linestyle(prompt_set, sets),
            "label": _label(method, prompt_set, sets),
        }
        yield line, style


def _method_kind(method: str) -> str | None:
    from repro import catalog

    entry = catalog.methods().get(method)
    return None if entry is None else entry.kind


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


def _step_curves(
    means: pd.DataFrame, column: str, ylabel: str, title: str, percent: bool = False, marker: str | None = None
) -> Figure:
    """One panel per backbone, one mean line + seed band per method x prompt set, against step."""
    scale = 100.0 if percent else 1.0
    backbones = _backbone_order(means["backbone"])
    sets = _prompt_sets(means)
    fig, axes = _panels(len(backbones))
    for ax, backbone in zip(axes, backbones, strict=True):
        part = means[means["backbone"] == backbone]
        for line, style in _method_lines(part, sets[backbone], "step"):
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
    window = _window(window)
    _check(training, "training", (*RUN_KEYS, "step"))
    missing = _grid_missing(training, expected, "training runs")
    notes: list[str] = []
    if metric is None:
        frame, ylabel, notes, lacking = reward_column(training, reward)
        missing += lacking
        column = REWARD_VALUE
    else:
        if metric not in training.columns:
            title = f"{metric} against step"
            return _empty(title, f"no run logged {metric!r}"), [f"no run logged {metric!r}", *missing]
        frame, column, ylabel = training, metric, _METRIC_LABELS.get(metric, metric)
    title = f"{ylabel.capitalize()} against step ({window}-step moving average)"
    with plot_style():
        means = seed_bands(frame, [column], window)
        missing += _absent_metric(training, means, ylabel if metric is None else metric)
        if means.empty:
            return _empty(title, f"no values of {ylabel}"), missing
        fig = _step_curves(means, column, f"{ylabel}\n({window}-step moving average)", title)
        _note(fig, [_band_note(means), *notes])
    return fig, sorted(set(missing), key=missing.index)


def heldout_curve(training: pd.DataFrame, window: int = 1, expected: Expected | None = None) -> Result:
    """Held-out accuracy (percent) against step: the CPU trainer's `heldout/accuracy`, scored every
    `eval_every` steps on problems it never trains on (repro.local.heldout); one panel per backbone, the
    mean over seeds with the seeds' min-max band, no smoothing by default (the points are sparse)."""
    window = _window(window)
    _check(training, "training", (*RUN_KEYS, "step"))
    title = "Held-out accuracy against step"
    missing = _grid_missing(training, expected, "training runs")
    if HELDOUT not in training.columns:
        note = f"no run logged {HELDOUT!r} (a CPU run with eval_every > 0 does)"
        return _empty(title, note), [note, *missing]
    with plot_style():
        means = seed_bands(training, [HELDOUT], window)
        missing += _absent_metric(training, means, HELDOUT)
        if means.empty:
            return _empty(title, f"no values of {HELDOUT!r}"), missing
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
    window = _window(window)
    _check(training, "training", (*RUN_KEYS, "step"))
    title = "Reward-entropy frontier"
    missing = _grid_missing(training, expected, "training runs")
    if entropy not in training.columns:
        note = f"no run logged {entropy!r}"
        return _empty(title, note), [note, *missing]
    frame, ylabel, notes, lacking = reward_column(training, reward)
    missing += lacking
    with plot_style():
        means = seed_bands(frame, [REWARD_VALUE, entropy], window)
        missing += _absent_metric(training, means, ylabel, entropy)
        if means.empty:
            return _empty(title, "no step logged both reward and entropy"), missing
        backbones = _backbone_order(means["backbone"])
        sets = _prompt_sets(means)
        fig, axes = _panels(len(backbones))
        for ax, backbone in zip(axes, backbones, strict=True):
            part = means[means["backbone"] == backbone]
            for line, style in _method_lines(part, sets[backbone], "step"):
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


def step_time(training: pd.DataFrame, paper: bool = True, expected: Expected | None = None) -> Result:
    """Figure 7 / Table 2: mean seconds per training step per method (step 1, with its warm-up, excluded).

    One panel per backbone with runs; bars are annotated with the cost relative to GRPO-n4 on the same
    backbone. With `paper`, the paper's Table 2 seconds stand beside them as hatched bars, annotated with
    the paper's ratio. The y axis turns logarithmic when the bars span more than 20x (a CPU miniature
    beside 8xH100 seconds), so both stay readable; the ratios are what compares.
    """
    from repro import paper as paper_tables

    _check(training, "training", (*RUN_KEYS, "step"))
    title = "Wall-clock seconds per training step"
    missing = _grid_missing(training, expected, "training runs")
    if STEP_TIME not in training.columns:
        return _empty(title, f"no run logged {STEP_TIME!r}"), [f"no run logged {STEP_TIME!r}", *missing]
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
            return _empty(title, "no step time after step 1"), missing
        means = rows.groupby(["backbone", "method"])[STEP_TIME].mean()
        backbones = _backbone_order(rows["backbone"])
        fig, axes = _panels(len(backbones), ncols_max=2, panel_size=(5.6, 3.6))
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
        for b in _backbone_order(set(reference["backbone"]) - have):
            if not any(line.startswith(f"backbone {b}:") for line in missing):
                missing.append(f"backbone {b}: paper Table 2 has times but there are no runs")
    return fig, missing


def _is_seq(method: str, frame: pd.DataFrame) -> bool:
    from repro import catalog

    known = catalog.methods()
    if method in known:
        return known[method].kind == "seq"
    cols = [c for c in (ADDITIONAL, MISSING_POS, MISSING_NEG, RESOLVED_2) if c in frame.columns]
    return bool(cols) and frame.loc[frame["method"] == method, cols].notna().any().any()


def sampling(training: pd.DataFrame, window: int = 20, expected: Expected | None = None) -> Result:
    """Figure 5, the sampling dynamics of the sequential (Seq) methods, one row of three panels per backbone:
    additional samples per step; prompts still active after all rounds, split into missing-positive
    (solid) and missing-negative (dashed); prompts meeting the exit rule within 2 rounds.

    One line per Seq method x prompt set (seeds averaged, `window`-step moving average); other methods
    have no rounds and are left out; Seq methods lacking a column are listed in `missing`.
    """
    window = _window(window)
    _check(training, "training", (*RUN_KEYS, "step"))
    title = "Sampling dynamics of the sequential methods"
    columns = [c for _, _, lines in SAMPLING_PANELS for c, _, _ in lines]
    grid = _paper_grid() if expected is None else {b: tuple(m) for b, m in expected.items()}
    seq_grid = {b: [m for m in ms if _is_seq(m, training)] for b, ms in grid.items()}
    missing = _grid_missing(training, {b: ms for b, ms in seq_grid.items() if ms}, "Seq runs")
    seq = training[[_is_seq(str(m), training) for m in training["method"]]]
    present = [c for c in columns if c in seq.columns]
    if seq.empty or not present:
        note = "no Seq-method runs" if seq.empty else "no Seq run logged the sampler columns"
        return _empty(title, note), [note, *missing]
    with plot_style():
        means = seed_mean(seq, present)
        for b, m, p in seq[["backbone", "method", "prompt_set"]].drop_duplicates().itertuples(index=False):
            cell = means[(means["backbone"] == b) & (means["method"] == m) & (means["prompt_set"] == p)]
            lacking = [c for c in columns if c not in cell.columns or cell[c].isna().all()]
            if lacking:
                missing.append(f"{b} {m} ({p}): no values of {', '.join(lacking)}")
        backbones = _backbone_order(means["backbone"])
        sets = _prompt_sets(means)
        fig, axes = new_figure(len(backbones), len(SAMPLING_PANELS), panel_size=(4.4, 3.3))
        for row, backbone in zip(axes, backbones, strict=True):
            part = means[means["backbone"] == backbone]
            for ax, (panel_title, ylabel, lines) in zip(row, SAMPLING_PANELS, strict=True):
                split = len(lines) > 1  # line style tells the columns apart; prompt sets get markers
                for method, prompt_set in _line_order(part):
                    cell = part[(part["method"] == method) & (part["prompt_set"] == prompt_set)].sort_values("step")
                    label = _label(method, prompt_set, sets[backbone])
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
                            linestyle=style if split else _linestyle(prompt_set, sets[backbone]),
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


# ----------------------------------------------------------------------------------------------- evaluation


def _pass_columns(frame: pd.DataFrame) -> dict[int, str]:
    out = {}
    for c in frame.columns:
        match = _PASS_RE.match(str(c))
        if match:
            out[int(match.group(1))] = str(c)
    return dict(sorted(out.items()))


def _records_passk(records: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """pass@k at k = 1, 2, 4, ... up to the samples per problem, pooled over every problem of the records."""
    from repro.evaluation.metrics import pass_at_k_array

    n, c = _counts(records)
    if n.size == 0:
        return {}
    top = int(n.min())
    ks = [2**i for i in range(int(math.log2(top)) + 1)]
    if ks[-1] != top:
        ks.append(top)
    return {k: float(np.mean(pass_at_k_array(n, c, k))) for k in ks}


def _final_rows(eval_df: pd.DataFrame) -> pd.DataFrame:
    steps = pd.to_numeric(eval_df["checkpoint_step"], errors="coerce")
    frame = eval_df.assign(checkpoint_step=steps)
    last = frame.groupby("run")["checkpoint_step"].transform("max")
    return frame[frame["checkpoint_step"] == last]


def passk(eval_df: pd.DataFrame, runs_root: Path | str | None = None, expected: Expected | None = None) -> Result:
    """Figure 4: pass@k (percent) of each run's final checkpoint against k on a log2 axis.

    Uses the benchmark-weighted rows (WEIGHTED_AVERAGE) when there are any, one panel per backbone;
    otherwise one panel per backbone x benchmark. With `runs_root`, a run whose eval records are found
    (<runs_root>/<run>/eval/global_step_<step>/<benchmark>.jsonl) gets pass@k at every power of two up to
    its samples per problem, recomputed from the records (pooled over benchmarks = problem-weighted),
    instead of only the ks its summary asked for. One line per method x prompt set, seeds averaged.
    """
    _check(eval_df, "eval", (*RUN_KEYS, "checkpoint_step", "benchmark"))
    title = "pass@k of the final checkpoints"
    missing = _grid_missing(eval_df, expected, "evaluated runs")
    if eval_df.empty:
        return _empty(title, "no evaluations"), ["no evaluations", *missing]
    final = _final_rows(eval_df)
    weighted = (final["benchmark"] == WEIGHTED_AVERAGE).any()
    if weighted:
        lacking = sorted(set(final["run"]) - set(final.loc[final["benchmark"] == WEIGHTED_AVERAGE, "run"]))
        missing += [f"run {r}: no {WEIGHTED_AVERAGE} row at its final checkpoint" for r in lacking]
        final = final[final["benchmark"] == WEIGHTED_AVERAGE]
    cols = _pass_columns(final)
    long = []
    for row in final.to_dict("records"):
        values = {k: row[c] for k, c in cols.items() if pd.notna(row.get(c))}
        if runs_root is not None:
            records = _run_records(Path(runs_root) / str(row["run"]), int(row["checkpoint_step"]))
            every = [r for rs in records.values() for r in rs]
            pooled = every if weighted else records.get(str(row["benchmark"]), [])
            if pooled:
                values = _records_passk(pooled)
        if not values:
            missing.append(f"run {row['run']} {row['benchmark']}: no pass@k values")
        for k, v in values.items():
            long.append({**{key: row[key] for key in RUN_KEYS}, "benchmark": row["benchmark"], "k": k, "value": v})
    if not long:
        return _empty(title, "no pass@k columns"), missing
    with plot_style():
        data = pd.DataFrame(long)
        data["value"] = pd.to_numeric(data["value"], errors="coerce") * 100.0
        means = data.groupby(["backbone", "benchmark", "method", "prompt_set", "k"], as_index=False)["value"].mean()
        panels = [
            (b, bench)
            for b in _backbone_order(means["backbone"])
            for bench in sorted(set(means.loc[means["backbone"] == b, "benchmark"]))
        ]
        sets = _prompt_sets(means)
        fig, axes = _panels(len(panels))
        for ax, (backbone, bench) in zip(axes, panels, strict=True):
            part = means[(means["backbone"] == backbone) & (means["benchmark"] == bench)]
            for line, style in _method_lines(part, sets[backbone], "k"):
                ax.plot(line["k"].to_numpy(), line["value"].to_numpy(), marker="o", markersize=3, **style)
            ks = sorted(set(part["k"]))
            ax.set_xscale("log", base=2)
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.set_title(backbone if bench == WEIGHTED_AVERAGE else f"{backbone}: {bench}")
            ax.set_xlabel("k (samples per problem)")
            ax.set_ylabel("pass@k (%)" + (", weighted over benchmarks" if bench == WEIGHTED_AVERAGE else ""))
            ax.legend(loc="lower right")
        fig.suptitle(title + (" (problem-weighted average over benchmarks)" if weighted else ""))
    return fig, missing


# ----------------------------------------------------------------------------------------------- signal loss


def _counts(records: Iterable[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Per problem (benchmark, problem_id): samples n and correct c; a repeated sample index counts once."""
    problems: dict[tuple[str, str], dict[int, bool]] = {}
    for r in records:
        key = (str(r.get("benchmark", "")), str(r["problem_id"]))
        problems.setdefault(key, {})[int(r["sample_index"])] = float(r["score"]) > CORRECT_THRESHOLD
    n = np.array([len(s) for s in problems.values()], dtype=int)
    c = np.array([sum(s.values()) for s in problems.values()], dtype=int)
    return n, c


def share_all_correct(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Unbiased shares of all-correct and all-wrong groups of size n = 1..k from evaluation records.

    A problem with c correct of k samples has C(c, n)/C(k, n) of its n-subsets all correct and
    C(k-c, n)/C(k, n) all wrong; both are averaged over problems. k is the smallest samples-per-problem
    count, so every problem contributes at every n. Returns columns n, all_correct, all_wrong (fractions).
    """
    from repro.evaluation.metrics import pass_at_k_array

    n, c = _counts(records)
    if n.size == 0:
        return pd.DataFrame(columns=["n", "all_correct", "all_wrong"])
    top = int(n.min())
    sizes = np.arange(1, top + 1)
    # C(k-c, n)/C(k, n) is 1 - pass@n; the product form of pass_at_k_array stays exact at large k
    wrong = [float(np.mean(1.0 - pass_at_k_array(n, c, s))) for s in sizes]
    correct = [float(np.mean(1.0 - pass_at_k_array(n, n - c, s))) for s in sizes]
    return pd.DataFrame({"n": sizes, "all_correct": correct, "all_wrong": wrong})


def _run_records(run: Path, step: int | None = None) -> dict[str, list[dict]]:
    """Eval records per benchmark of a run's checkpoint (the latest evaluated one when step is None)."""
    from repro.evaluation.runner import read_records

    folders = {}
    for p in (run / "eval").glob("global_step_*"):
        suffix = p.name.removeprefix("global_step_")
        if p.is_dir() and suffix.isdigit():
            folders[int(suffix)] = p
    if not folders:
        return {}
    chosen = folders.get(step) if step is not None else folders[max(folders)]
    if chosen is None:
        return {}
    out = {}
    for f in sorted(chosen.glob("*.jsonl")):
        records, _ = read_records(f)
        if records:
            out[f.stem] = records
    return out


def _records_from_path(path: Path) -> dict[str, list[dict]]:
    """Label -> records from a runs root, one run folder, an eval folder or one .jsonl file.

    Runs are labelled by their method key (folder name backbone__method__prompt_set__s<seed>); seeds and
    prompt sets of one backbone x method are pooled; several backbones get "backbone: method" labels.
    """
    from repro.evaluation.runner import read_records

    if path.is_file():
        return {path.stem: read_records(path)[0]}
    if not path.is_dir():
        return {}
    if list(path.glob("*.jsonl")):
        return {path.name: [r for f in sorted(path.glob("*.jsonl")) for r in read_records(f)[0]]}
    runs = [path] if (path / "eval").is_dir() else sorted(p for p in path.iterdir() if (p / "eval").is_dir())
    grouped: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        parts = run.name.split("__")
        backbone, method = (parts[0], parts[1]) if len(parts) >= 2 else ("", run.name)
        records = [r for rs in _run_records(run).values() for r in rs]
        if records:
            grouped.setdefault((backbone, method), []).extend(records)
    backbones = _backbone_order(b for b, _ in grouped)
    methods = sort_methods(m for _, m in grouped)
    order = sorted(grouped, key=lambda bm: (backbones.index(bm[0]), methods.index(bm[1])))
    several = len(backbones) > 1
    return {f"{b}: {m}" if several else m: grouped[(b, m)] for b, m in order}


def signal_loss(
    source: Path | str | Mapping[str, Iterable[Mapping[str, Any]]] | Iterable[Mapping[str, Any]] | None = None,
    *,
    max_n: int = 256,
    pass_at_1: float = 0.265,
    pass_at_k: float = 0.813,
    k: int = 256,
) -> Result:
    """Figure 2: shares of all-correct (left) and all-wrong (right) groups against group size n, in percent.

    `source` is a runs root, run folder, eval folder or .jsonl (the final evaluated checkpoint of each
    run, one line per method), a mapping label -> records, or a list of records. With no records
    (None, or a path holding none) the curve is `repro simulate signal-loss`'s: E[p^n] and E[(1-p)^n]
    under a Beta fitted to the paper's base-model pass@1 = 26.5% and pass@256 = 81.3%, n = 1..max_n.
    The paper's two reported all-correct shares of its RL checkpoint (35.3% at n = 4, 10.2% at n = 256)
    are marked "paper" on the left panel.
    """
    from repro import paper as paper_tables

    missing: list[str] = []
    if source is None:
        labelled: dict[str, list] = {}
    elif isinstance(source, (str, Path)):
        labelled = _records_from_path(Path(source))
        if not labelled:
            missing.append(f"no eval records under {source}")
    elif isinstance(source, Mapping):
        labelled = {str(label): list(records) for label, records in source.items()}
    else:
        labelled = {"eval records": list(source)}
    curves: dict[str, pd.DataFrame] = {}
    for label, records in labelled.items():
        table = share_all_correct(records)
        if table.empty:
            missing.append(f"{label}: no usable eval records")
        else:
            curves[label] = table
    simulated = not curves
    if simulated:
        from repro.simulate import pass_rates as pr
        from repro.simulate.signal_loss import signal_loss as simulate

        rates = pr.from_pass_at_k(pass_at_1, pass_at_k, k)
        sim = simulate(rates, max_n, prompts=1, seed=0)
        label = f"simulated: Beta fit to base pass@1={pass_at_1:.1%}, pass@{k}={pass_at_k:.1%}"
        curves[label] = pd.DataFrame({"n": sim.n, "all_correct": sim.all_correct, "all_wrong": sim.all_wrong})
        missing.append("no eval records: the curves are simulated (`repro simulate signal-loss`), not measured")
    reported = paper_tables.signal_loss()
    reported = reported[reported["statistic"] == "all-correct groups"]
    with plot_style():
        fig, axes = new_figure(1, 2, panel_size=(5.0, 3.6))
        left, right = axes[0]
        top = max(int(t["n"].max()) for t in curves.values())
        for label, table in curves.items():
            method = label.split(": ")[-1]
            color = method_color(method) if not simulated else "#555555"
            for ax, column in ((left, "all_correct"), (right, "all_wrong")):
                ax.plot(table["n"].to_numpy(), table[column].to_numpy() * 100.0, color=color, label=label)
        left.scatter(
            reported["k"].to_numpy(),
            reported["value_percent"].to_numpy(),
            marker="*",
            s=90,
            color=PAPER_COLOR,
            zorder=5,
            label="paper",
        )
        for kk, v, model in zip(reported["k"], reported["value_percent"], reported["model"], strict=True):
            left.annotate(
                f"{v:g}% ({model.split(' ', 1)[-1]})",
                (kk, v),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
        top = max(top, int(reported["k"].max()))
        ticks = [2**i for i in range(int(math.log2(top)) + 1)]
        for ax, what in ((left, "all-correct"), (right, "all-wrong")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.set_xlabel("group size n")
            ax.set_ylabel(f"{what} groups (% of prompts)")
            ax.set_title(f"Share of {what} groups (no learning signal)")
            ax.legend(loc="upper right")
        source_note = "simulated" if simulated else "from eval records, unbiased over n-subsets"
        fig.suptitle(f"Signal loss against group size ({source_note})")
    return fig, missing
