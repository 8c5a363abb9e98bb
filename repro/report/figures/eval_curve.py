"""The eval-curve family: Ave@k of every evaluated checkpoint against its training step, so a reader sees
whether a method's lead over GRPO is there from the first checkpoints or appears only at the end (the
table reads one checkpoint; `repro eval RUN --all-checkpoints` evaluates all of them).

It draws from the eval table (`repro collect`: one row per run x checkpoint step x benchmark), in the
training curves' conventions (`training.seed_bands`: the mean over seeds with the seeds' min-max band),
but one panel per backbone x prompt set: the step axis means the same training only within one prompt set.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator

from repro.report.figures.common import Expected, Result, backbone_order, empty_figure, method_lines, panels, prologue
from repro.report.figures.training import _band_note, _curve_legend, _draw_band, _note, seed_bands
from repro.report.schema import WEIGHTED_AVERAGE
from repro.report.style import PAPER_COLOR, plot_style

__all__ = ["BASE_LABEL", "EVAL_VALUE", "MAX_STEP_TICKS", "ONE_CHECKPOINT_NOTE", "POINT_LEGEND", "eval_curve"]

EVAL_VALUE = "ave_at_k"
BASE_LABEL = "base model"  # the dashed reference line's legend entry
POINT_LEGEND = "point = seed mean, bar = seed min-max"
MAX_STEP_TICKS = 8  # up to this many evaluated steps get a tick each; more get matplotlib's integer ticks
ONE_CHECKPOINT_NOTE = "only one checkpoint per run was evaluated (`repro eval RUN --all-checkpoints` evaluates all)"


def _origins(eval_df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(trained runs' rows, base models' rows, released checkpoints' rows): only trained runs have steps."""
    if "origin" not in eval_df.columns:  # collect adds the column only when a model run folder exists
        empty = eval_df.iloc[0:0]
        return eval_df, empty, empty
    from repro.evaluation.runner import BASE_MODEL, RELEASED_CHECKPOINT
    from repro.report.schema import ORIGIN_RUN

    origin = eval_df["origin"]
    trained = origin.isna() | (origin == ORIGIN_RUN)
    return eval_df[trained], eval_df[origin == BASE_MODEL], eval_df[origin == RELEASED_CHECKPOINT]


def _k_label(rows: pd.DataFrame) -> str:
    """The axis name: "Ave@32" when every drawn row sampled alike, else "Ave@k" (no single k is true)."""
    ks = sorted({int(k) for k in pd.to_numeric(rows["k"], errors="coerce").dropna()}) if "k" in rows.columns else []
    return f"Ave@{ks[0]}" if len(ks) == 1 else "Ave@k"


def _uneven_steps(trained: pd.DataFrame) -> list[str]:
    """Cells whose seeds were evaluated at different steps: there a point averages only the seeds it has."""
    out = []
    for (backbone, method, prompt_set), cell in trained.groupby(["backbone", "method", "prompt_set"], sort=True):
        steps = {frozenset(rows["checkpoint_step"]) for _, rows in cell.groupby("run")}
        if len(steps) > 1:
            out.append(
                f"{backbone} {method} ({prompt_set}): seeds evaluated at different steps; "
                "each point is the mean of the seeds evaluated there"
            )
    return out


def _spread(ax: Axes, line: pd.DataFrame, style: dict, scale: float) -> None:
    """The seeds' min-max: a band along a line, an error bar on a lone point (a band there has no width)."""
    x = line["step"].to_numpy()
    lo, hi = line[f"{EVAL_VALUE}:lo"].to_numpy() * scale, line[f"{EVAL_VALUE}:hi"].to_numpy() * scale
    seeds = line["seeds"].to_numpy()
    if len(x) > 1:
        _draw_band(ax, x, lo, hi, seeds, style["color"], style["label"])
    elif int(seeds.max()) > 1:
        y = line[EVAL_VALUE].to_numpy() * scale
        yerr = [y - lo, hi - y]
        ax.errorbar(x, y, yerr=yerr, color=style["color"], linewidth=0.8, capsize=2, label=f"_{style['label']} spread")


def _base_values(base: pd.DataFrame) -> dict[str, float]:
    """Per backbone the base model's value: the mean over its evaluated folders (one, as a rule)."""
    values = pd.to_numeric(base[EVAL_VALUE], errors="coerce")
    return {str(b): float(v) for b, v in values.groupby(base["backbone"]).mean().dropna().items()}


def _step_ticks(ax: Axes, steps: pd.Series) -> None:
    """A tick at every evaluated step when they are few (the checkpoints are the data), else integer ticks."""
    unique = sorted({int(s) for s in steps})
    if len(unique) <= MAX_STEP_TICKS:
        ax.set_xticks(unique, [str(s) for s in unique])
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _panel_keys(means: pd.DataFrame) -> list[tuple[str, str]]:
    """(backbone, prompt set) panels: backbones in catalog order, 'standard' first within each."""
    out = []
    for backbone in backbone_order(means["backbone"]):
        sets = set(means.loc[means["backbone"] == backbone, "prompt_set"])
        out += [(backbone, s) for s in sorted(sets, key=lambda s: (s != "standard", s))]
    return out


def eval_curve(eval_df: pd.DataFrame, benchmark: str = WEIGHTED_AVERAGE, expected: Expected | None = None) -> Result:
    """Ave@k (percent) against checkpoint step: one panel per backbone x prompt set, one line per method
    (the mean over seeds, a band from the least to the greatest seed), a marker at every evaluated step.

    `benchmark` is the eval table's WEIGHTED_AVERAGE row (the problem-weighted average, the default) or one
    benchmark's name. A base model evaluated by name (origin "base-model", step 0) is drawn as a dashed
    horizontal line in each of its backbone's panels: where RL started. Released checkpoints are left out
    and listed in `missing`: their training step is not known, so they have no place on the step axis
    (`repro table weighted-average` shows them). With one evaluated checkpoint per run the figure still
    draws, one point per method (its seed spread as an error bar), and says so in its note.
    """
    _, missing = prologue(
        eval_df,
        expected,
        table="eval",
        columns=("checkpoint_step", "benchmark", EVAL_VALUE),
        what="evaluated runs",
    )
    trained, base, released = _origins(eval_df)
    missing += [f"{run}: a released checkpoint, not drawn (no training step)" for run in sorted(set(released["run"]))]
    what = "weighted Ave@k" if benchmark == WEIGHTED_AVERAGE else f"Ave@k on {benchmark}"
    title = f"{what} of every evaluated checkpoint against training step"
    chosen = trained[trained["benchmark"] == benchmark]
    if chosen.empty:
        have = sorted(set(trained["benchmark"]))
        note = f"no trained run has {benchmark!r} rows" + (f" (the eval table has {', '.join(have)})" if have else "")
        return empty_figure(title, note), [note, *missing]
    missing += [f"run {r}: no {benchmark} rows" for r in sorted(set(trained["run"]) - set(chosen["run"]))]
    missing += _uneven_steps(chosen)
    label = _k_label(chosen)
    what = f"weighted {label}" if benchmark == WEIGHTED_AVERAGE else f"{label} on {benchmark}"
    title = f"{what} of every evaluated checkpoint against training step"
    base_values = _base_values(base[base["benchmark"] == benchmark])
    scale = 100.0
    with plot_style():
        means = seed_bands(chosen.rename(columns={"checkpoint_step": "step"}), [EVAL_VALUE])
        keys = _panel_keys(means)
        fig, axes = panels(len(keys))
        for ax, (backbone, prompt_set) in zip(axes, keys, strict=True):
            part = means[(means["backbone"] == backbone) & (means["prompt_set"] == prompt_set)]
            for line, style in method_lines(part, [prompt_set], "step"):
                _spread(ax, line, style, scale)
                ax.plot(
                    line["step"].to_numpy(), line[EVAL_VALUE].to_numpy() * scale, marker="o", markersize=3.5, **style
                )
            if backbone in base_values:
                value = base_values[backbone] * scale
                ax.axhline(value, color=PAPER_COLOR, linestyle="--", linewidth=1.0, label=BASE_LABEL)
            ax.set_title(f"{backbone} ({prompt_set} prompts)")
            ax.set_xlabel("checkpoint (training step)")
            _step_ticks(ax, part["step"])
            ax.set_ylabel(f"{what} (%)")
            _curve_legend(ax, int(part["seeds"].max()))
            if int(part["seeds"].max()) > 1 and part.groupby("method")["step"].nunique().max() == 1:
                ax.get_legend().set_title(POINT_LEGEND)  # lone points: the spread is an error bar, not a band
        fig.suptitle(title)
        _note(fig, _notes(chosen, means, base_values, backbone_order(means["backbone"])))
    missing += [f"backbone {b}: no base model evaluated (no dashed reference)" for b in _no_base(means, base_values)]
    return fig, missing


def _no_base(means: pd.DataFrame, base_values: dict[str, float]) -> list[str]:
    return [b for b in backbone_order(means["backbone"]) if b not in base_values]


def _notes(
    chosen: pd.DataFrame, means: pd.DataFrame, base_values: dict[str, float], backbones: Sequence[str]
) -> list[str]:
    """The small print: what line and band are, one checkpoint per run when so, the dashed line's meaning."""
    lines = [_band_note(means)]
    per_run = chosen.groupby("run")["checkpoint_step"].nunique()
    if len(per_run) and int(per_run.max()) == 1:
        lines.append(ONE_CHECKPOINT_NOTE + ": points, not curves")
        if int(means["seeds"].max()) > 1:  # a lone point's spread is an error bar, not a band
            lines[0] = f"point: mean over seeds (up to {int(means['seeds'].max())}); error bar: min-max over seeds"
    if any(b in base_values for b in backbones):
        lines.append(f"dashed: the {BASE_LABEL} before RL (evaluated by name)")
    return lines
