"""Paper-style tables from the tidy results (schema.py) beside the paper's numbers (paper.py).

Three builders return one DataFrame each, ready for any renderer:

- `weighted_average_table`: Table 1, Ave@k per benchmark and the weighted average, measured beside the
  paper, with the delta to the paper and the paired difference to the same backbone and prompt set's
  GRPO-n4, each with its 95% interval over seeds (`repro.report.stats`: Student t, because seeds are few).
- `step_time_table`: Table 2, seconds per training step and the cost relative to GRPO-n4.
- `sampling_table`: what the samplers did per step (responses, signal and zero-variance shares, Seq's
  unresolved prompts, additional samples).

Released checkpoints and base models evaluated by name (`repro eval NAME`, collected from their model run
folders) are rows of their own in the weighted-average table: method "seq-balance (released checkpoint)"
right after the trained "seq-balance" row of the same backbone and prompt set, with the paper columns of
the Table 1 row the checkpoint should reproduce; "base model" (prompt set "none") first in its backbone.

Accuracies and shares are percentages (x100, one decimal) so they sit beside the paper's. A cell
without a run is missing (NaN), never zero; every renderer prints it as "—" (LaTeX: "--"). Column
names say where a number comes from: "... measured" and "... paper". `missing_measured` lists the rows
a table holds without any measured number.

Intervals are two columns in the DataFrame, "<x> 95% low" and "<x> 95% high" (numbers, so the CSV keeps
them); the markdown, LaTeX and terminal renderers print the pair as one column "<x> 95% CI" reading
"[low, high]", and "—" where there is no interval (one seed, or one seed in common).
`weighted_by_seed` and `paired_difference` give the same numbers at full precision (for `repro report`).

Renderers: `to_markdown`, `to_latex` (booktabs, written by hand), `to_csv` and `to_rich`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from repro import paper
from repro.errors import ReproError
from repro.report import stats
from repro.report.schema import RUN_KEYS, WEIGHTED_AVERAGE

__all__ = [
    "CI_HIGH",
    "CI_LOW",
    "GROUP_KEYS",
    "MISSING",
    "MISSING_LATEX",
    "REFERENCE_METHOD",
    "SAMPLING_COLUMNS",
    "latex_escape",
    "missing_measured",
    "paired_difference",
    "paired_values",
    "row_label",
    "sampling_table",
    "sorted_backbones",
    "step_time_table",
    "to_csv",
    "to_latex",
    "to_markdown",
    "to_rich",
    "weighted_average_table",
    "weighted_by_seed",
]

GROUP_KEYS = ("backbone", "prompt_set", "method")
REFERENCE_METHOD = "grpo-n4"
MISSING = "—"
MISSING_LATEX = "--"

WEIGHTED_MEASURED = "weighted measured"
WEIGHTED_PAPER = "weighted paper"
DELTA_PAPER = "delta paper"
DELTA_REFERENCE = f"delta {REFERENCE_METHOD}"
CI_LOW = " 95% low"  # suffixes of an interval's two columns; renderers print the pair as "<x> 95% CI"
CI_HIGH = " 95% high"
CI_SHOWN = " 95% CI"
N_PAIRED = "n_paired"
STEP_TIMING = "timing_s/step"

# builders record per-column decimals and the measured columns in DataFrame.attrs
_DECIMALS = "decimals"
_MEASURED = "measured"


# ------------------------------------------------------------------------------------------ ordering


def _order(kind: str) -> list[str]:
    """The display order of backbones, methods, prompt sets and benchmarks: catalog order first."""
    from repro import catalog

    if kind == "backbone":
        return list(catalog.backbones())
    if kind == "method":
        return list(catalog.methods())
    if kind == "prompt_set":
        return list(catalog.prompt_sets())
    if kind == "benchmark":
        from repro.tasks.tiny_arith import TIERS

        return [*paper.BENCHMARKS, *catalog.benchmarks(), *TIERS]
    raise ValueError(kind)


def _rank(values: Iterable[str], kind: str) -> dict[str, tuple[float, str]]:
    known = {name: i for i, name in reversed(list(enumerate(_order(kind))))}
    if kind == "method":
        return {v: (_method_position(str(v), known), str(v)) for v in values}
    if kind == "prompt_set":
        from repro.report.collect import NO_PROMPT_SET

        known = {NO_PROMPT_SET: -1, **known}  # a base model (trained on no prompt set) leads its backbone
    return {v: (known.get(v, len(known)), str(v)) for v in values}


def _method_position(method: str, known: dict[str, int]) -> float:
    """A base model before every method; a released checkpoint right after the method that trained it."""
    from repro.report.collect import BASE_MODEL_LABEL, RELEASED_SUFFIX

    if method == BASE_MODEL_LABEL:
        return -1
    if method.endswith(RELEASED_SUFFIX) and method.removesuffix(RELEASED_SUFFIX) in known:
        return known[method.removesuffix(RELEASED_SUFFIX)] + 0.5
    return known.get(method, len(known))


def _sort(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    if frame.empty:
        return frame.reset_index(drop=True)
    ranks = {k: _rank(frame[k].unique(), k) for k in keys}
    return frame.sort_values(list(keys), key=lambda col: col.map(ranks[col.name])).reset_index(drop=True)


def sorted_names(names: Iterable[str], kind: str) -> list[str]:
    """Backbone, method or prompt-set names in display order: the catalog's first, then unknown ones
    alphabetically."""
    names = set(map(str, names))
    ranks = _rank(names, kind)
    return sorted(names, key=ranks.__getitem__)


def sorted_backbones(names: Iterable[str]) -> list[str]:
    return sorted_names(names, "backbone")


def _sorted_benchmarks(names: Iterable[str]) -> list[str]:
    names = set(names)
    ranks = _rank(names, "benchmark")
    return sorted(names, key=ranks.__getitem__)


# ------------------------------------------------------------------------------------------ inputs


def _require(frame: pd.DataFrame, columns: Iterable[str], table: str) -> None:
    lacking = [c for c in columns if c not in frame.columns]
    if lacking:
        raise ReproError(f"the {table} table lacks column(s) {', '.join(lacking)}; rerun `repro collect`")


def _select_checkpoint(eval_df: pd.DataFrame, checkpoint: str | int) -> pd.DataFrame:
    steps = pd.to_numeric(eval_df["checkpoint_step"], errors="coerce")
    if str(checkpoint) == "final":
        return eval_df[steps == steps.groupby(eval_df["run"]).transform("max")]
    try:
        step = int(str(checkpoint))
    except ValueError:
        raise ReproError(f"checkpoint must be 'final' or a step number, got {checkpoint!r}") from None
    return eval_df[steps == step]


def _filter_prompt_set(frame: pd.DataFrame, prompt_set: str | None) -> pd.DataFrame:
    if prompt_set is None or "prompt_set" not in frame.columns:
        return frame
    return frame[frame["prompt_set"] == prompt_set]


def _percent(values: pd.Series | pd.DataFrame) -> pd.Series | pd.DataFrame:
    return (values.astype(float) * 100).round(1)


# ------------------------------------------------------------------------------- weighted average


def _paper_rows(prompt_set: str | None) -> pd.DataFrame:
    """Table 1 per benchmark, plus the methods the paper reports only as a weighted average."""
    keys = list(GROUP_KEYS)
    table1 = paper.table1()[[*keys, *paper.BENCHMARKS, "weighted_average"]]
    summary = paper.weighted_averages()[[*keys, "weighted_average"]]
    known = set(map(tuple, table1[keys].itertuples(index=False)))
    extra = summary[[tuple(row) not in known for row in summary[keys].itertuples(index=False)]]
    rows = pd.concat([table1, extra], ignore_index=True)
    rows = rows.rename(columns={b: f"{b} paper" for b in paper.BENCHMARKS} | {"weighted_average": WEIGHTED_PAPER})
    return _filter_prompt_set(rows, prompt_set)


def _paper_twins(eval_df: pd.DataFrame) -> dict[tuple[str, str, str], tuple[str, str, str]]:
    """(backbone, prompt_set, method label) of each released checkpoint's rows -> the Table 1 row it should
    reproduce: the catalog's `table1_row`, else the same cell with the label's method."""
    if "origin" not in eval_df.columns or "model" not in eval_df.columns:
        return {}
    from repro import catalog
    from repro.evaluation.runner import RELEASED_CHECKPOINT
    from repro.report.collect import RELEASED_SUFFIX

    released = eval_df[eval_df["origin"] == RELEASED_CHECKPOINT]
    out = {}
    for backbone, prompt_set, method, model in (
        released[["backbone", "prompt_set", "method", "model"]].drop_duplicates().itertuples(index=False)
    ):
        try:
            row = catalog.get_checkpoint(str(model)).table1_row
            twin = (row["backbone"], row["prompt_set"], row["method"])
        except ReproError:  # a checkpoint the catalog no longer lists
            twin = (backbone, prompt_set, str(method).removesuffix(RELEASED_SUFFIX))
        out[(backbone, prompt_set, method)] = twin
    return out


def _fill_paper_twins(table: pd.DataFrame, twins: dict[tuple[str, str, str], tuple[str, str, str]]) -> None:
    """Give each released checkpoint's row the paper numbers of its Table 1 row (in place)."""
    if not twins:
        return
    reported = _paper_rows(None).set_index(list(GROUP_KEYS))
    columns = [c for c in reported.columns if c in table.columns]
    for index, key in zip(table.index, table[list(GROUP_KEYS)].itertuples(index=False), strict=True):
        twin = twins.get(tuple(key))
        if twin is not None and twin in reported.index:
            table.loc[index, columns] = reported.loc[twin, columns].to_numpy(dtype=float)


def _is_trained(frame: pd.DataFrame) -> pd.Series:
    """Rows of trained runs (not a released checkpoint or base model evaluated by name): only these pair by seed."""
    if "origin" not in frame.columns:
        return pd.Series(True, index=frame.index)
    from repro.report.collect import ORIGIN_RUN

    origin = frame["origin"]
    return origin.isna() | (origin == ORIGIN_RUN)


def _per_run(eval_df: pd.DataFrame) -> tuple[pd.Series, pd.DataFrame]:
    """Each run's Ave@k per benchmark (a Series on keys, run, benchmark) and one row per run: keys, run, seed,
    trained, benchmarks (the measured ones, comma-joined: what its weighted average covers) and weighted
    (a fraction: the run's weighted average as collect wrote it, else computed from its benchmarks)."""
    keys = list(GROUP_KEYS)
    frame = eval_df.assign(ave_at_k=pd.to_numeric(eval_df["ave_at_k"], errors="coerce"), trained=_is_trained(eval_df))
    is_weighted = frame["benchmark"] == WEIGHTED_AVERAGE
    bench = frame[~is_weighted]
    per_run_bench = bench.groupby([*keys, "run", "benchmark"], sort=False)["ave_at_k"].mean()

    # the run's weighted average as collect wrote it; computed from its benchmarks where that row is absent
    weighted = frame[is_weighted].groupby([*keys, "run"], sort=False)["ave_at_k"].mean()
    if "problems" in bench.columns and not bench.empty:
        sized = bench.assign(problems=pd.to_numeric(bench["problems"], errors="coerce"))
        sized = sized.dropna(subset=["problems", "ave_at_k"])
        sized = sized.assign(product=sized["ave_at_k"] * sized["problems"])
        sums = sized.groupby([*keys, "run"], sort=False)[["product", "problems"]].sum()
        computed = sums["product"] / sums["problems"]
        weighted = weighted.combine_first(computed)

    runs = frame.groupby([*keys, "run"], sort=False).agg(seed=("seed", "first"), trained=("trained", "all"))
    measured = per_run_bench.dropna().reset_index()
    covers = measured.groupby([*keys, "run"], sort=False)["benchmark"].agg(lambda b: ",".join(_sorted_benchmarks(b)))
    runs["benchmarks"] = covers.reindex(runs.index).fillna("")
    runs["weighted"] = weighted.reindex(runs.index).astype(float)
    return per_run_bench, runs.reset_index()


def _measured_rows(eval_df: pd.DataFrame) -> tuple[pd.DataFrame, list[str], pd.DataFrame]:
    """Per (backbone, prompt_set, method): seeds averaged, in percent; the benchmarks measured; the per-run rows."""
    keys = list(GROUP_KEYS)
    if eval_df.empty:
        empty_runs = pd.DataFrame(columns=[*keys, "run", "seed", "trained", "benchmarks", "weighted"])
        return pd.DataFrame(columns=[*keys, "n_seeds", WEIGHTED_MEASURED]), [], empty_runs
    per_run_bench, runs = _per_run(eval_df)
    benchmarks = _sorted_benchmarks(per_run_bench.index.get_level_values("benchmark").unique())

    n_runs = eval_df.groupby(keys, sort=False)["run"].nunique().rename("n_seeds")
    by_bench = per_run_bench.groupby([*keys, "benchmark"]).mean().unstack("benchmark")
    by_bench = by_bench.reindex(columns=benchmarks).rename(columns=lambda b: f"{b} measured")
    weighted = runs.groupby(keys)["weighted"].mean().rename(WEIGHTED_MEASURED)
    out = pd.concat([n_runs, by_bench, weighted], axis=1)
    measured = [c for c in out.columns if c != "n_seeds"]
    out[measured] = _percent(out[measured])
    out.columns.name = None
    return out.reset_index(), benchmarks, runs


def _by_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """Per-run rows -> one row per (keys, seed) in percent at full precision; runs of one seed are averaged."""
    keys = list(GROUP_KEYS)
    columns = [*keys, "seed", "trained", "benchmarks", "weighted"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    grouped = runs.groupby([*keys, "seed"], sort=False, dropna=False)
    out = grouped.agg(
        trained=("trained", "all"),
        benchmarks=("benchmarks", lambda b: ",".join(sorted(set(b))) if b.nunique() > 1 else b.iloc[0]),
        weighted=("weighted", "mean"),
    )
    out["weighted"] = out["weighted"].astype(float) * 100
    return out.reset_index()[columns]


def weighted_by_seed(
    eval_df: pd.DataFrame, prompt_set: str | None = None, checkpoint: str | int = "final"
) -> pd.DataFrame:
    """One row per (backbone, prompt_set, method, seed): the weighted Ave@k in percent at full precision,
    `trained` (False for a released checkpoint or base model evaluated by name: they have no seed to pair)
    and `benchmarks` (the benchmarks that weighted average covers, comma-joined)."""
    _require(eval_df, [*RUN_KEYS, "checkpoint_step", "benchmark", "ave_at_k"], "eval")
    selected = _filter_prompt_set(_select_checkpoint(eval_df, checkpoint), prompt_set)
    return _by_seed(_measured_rows(selected)[2])


def paired_difference(
    by_seed: pd.DataFrame, backbone: str, prompt_set: str, method: str, reference: str = REFERENCE_METHOD
) -> stats.Interval:
    """The t interval of d_s = weighted(method, s) - weighted(reference, s), percentage points, over the
    seeds both trained runs have with the same benchmarks measured (same backbone and prompt set: the same
    data order). n = 0 when they share no such seed; no interval when they share one."""
    return stats.t_interval(paired_values(by_seed, backbone, prompt_set, method, reference))


def paired_values(
    by_seed: pd.DataFrame, backbone: str, prompt_set: str, method: str, reference: str = REFERENCE_METHOD
) -> np.ndarray:
    """The d_s of `paired_difference`, in seed order (what a verdict's stability is computed from)."""
    cell = by_seed[(by_seed["backbone"] == backbone) & (by_seed["prompt_set"] == prompt_set)]
    cell = cell[cell["trained"].astype(bool)]

    def per_seed(name: str) -> dict:
        rows = cell[cell["method"] == name]
        return {s: (float(w), b) for s, w, b in zip(rows["seed"], rows["weighted"], rows["benchmarks"], strict=True)}

    mine, theirs = per_seed(method), per_seed(reference)
    like = [s for s in mine if s in theirs and mine[s][1] == theirs[s][1]]
    return stats.paired_differences({s: mine[s][0] for s in like}, {s: theirs[s][0] for s in like})


def gain_over_base(by_seed: pd.DataFrame, backbone: str, prompt_set: str, method: str) -> tuple[stats.Interval, float]:
    """The t interval of `gain_values` and the base model's weighted average."""
    gains, base = gain_values(by_seed, backbone, prompt_set, method)
    empty = stats.Interval(math.nan, math.nan, math.nan, 0)
    return (stats.t_interval(gains) if len(gains) else empty), base


def gain_values(by_seed: pd.DataFrame, backbone: str, prompt_set: str, method: str) -> tuple[np.ndarray, float]:
    """(g_s = weighted(method, s) - weighted(base model) over the method's seeds, the base model's weighted
    average): how much RL moved the model it started from. The base model is one evaluated
    model (no seed), so its own sampling noise is a shared offset the interval does not include; only seeds
    whose benchmarks match the base model's count. NaN base and no g_s when the base model was not evaluated."""
    from repro.report.collect import BASE_MODEL_LABEL

    rows = by_seed[by_seed["backbone"] == backbone]
    base = rows[rows["method"] == BASE_MODEL_LABEL]
    if len(base) != 1:
        return np.array([], dtype=float), math.nan
    base_value, base_benchmarks = float(base["weighted"].iloc[0]), base["benchmarks"].iloc[0]
    trained = rows[rows["trained"].astype(bool) & (rows["prompt_set"] == prompt_set) & (rows["method"] == method)]
    gains = [
        float(w) - base_value
        for w, b in zip(trained["weighted"], trained["benchmarks"], strict=True)
        if b == base_benchmarks
    ]
    return np.array(gains, dtype=float), base_value


def _seed_intervals(table: pd.DataFrame, by_seed: pd.DataFrame) -> None:
    """The 95% interval of the weighted average over seeds and the paired difference to GRPO-n4 (in place)."""
    keys = list(GROUP_KEYS)
    groups = {key: frame["weighted"] for key, frame in by_seed.groupby(keys, sort=False)} if len(by_seed) else {}
    weighted = [stats.t_interval(groups.get(tuple(k), ())) for k in table[keys].itertuples(index=False)]
    table[WEIGHTED_MEASURED + CI_LOW] = [round(i.low, 1) for i in weighted]
    table[WEIGHTED_MEASURED + CI_HIGH] = [round(i.high, 1) for i in weighted]

    trained = set(map(tuple, by_seed.loc[by_seed["trained"].astype(bool), keys].itertuples(index=False)))
    deltas, lows, highs, counts = [], [], [], []
    for backbone, prompt_set, method in table[keys].itertuples(index=False):
        interval = stats.Interval(math.nan, math.nan, math.nan, 0)
        if (backbone, prompt_set, method) in trained:
            interval = paired_difference(by_seed, backbone, prompt_set, method)
        deltas.append(round(interval.mean, 1))
        lows.append(round(interval.low, 1))
        highs.append(round(interval.high, 1))
        counts.append(interval.n if interval.n else pd.NA)
    table[DELTA_REFERENCE] = deltas
    table[DELTA_REFERENCE + CI_LOW] = lows
    table[DELTA_REFERENCE + CI_HIGH] = highs
    table[N_PAIRED] = pd.array(counts, dtype="Int64")


def _unpaired_reference_delta(table: pd.DataFrame, by_seed: pd.DataFrame) -> pd.Series:
    """measured - the same backbone and prompt set's measured GRPO-n4, between the one-decimal values shown,
    for rows with no seed to pair (released checkpoints, base models); only with the same benchmarks measured."""
    per_bench = [c for c in table.columns if c.endswith(" measured") and c != WEIGHTED_MEASURED]
    coverage = [tuple(row) for row in table[per_bench].notna().itertuples(index=False)]
    pairs = list(zip(table["backbone"], table["prompt_set"], strict=True))
    is_ref = (table["method"] == REFERENCE_METHOD).tolist()
    ref_value = {p: v for p, v, r in zip(pairs, table[WEIGHTED_MEASURED], is_ref, strict=True) if r}
    ref_cover = {p: c for p, c, r in zip(pairs, coverage, is_ref, strict=True) if r}
    reference = pd.Series([ref_value.get(p, math.nan) for p in pairs], index=table.index, dtype=float)
    like = pd.Series([ref_cover.get(p) == c for p, c in zip(pairs, coverage, strict=True)], index=table.index)
    return (table[WEIGHTED_MEASURED] - reference).where(like).round(1)


def weighted_average_table(
    eval_df: pd.DataFrame | None,
    prompt_set: str | None = None,
    checkpoint: str | int = "final",
    *,
    measured_only: bool = False,
) -> pd.DataFrame:
    """Table 1: one row per (backbone, prompt_set, method) over the paper's rows and the measured runs.

    Columns: the keys, `n_seeds` (measured runs averaged), per benchmark "<b> measured" and "<b> paper"
    (only for benchmarks some row has), "weighted measured" (the mean over seeds) with "weighted measured
    95% low/high" (its Student t interval over seeds: few seeds, see `repro.report.stats`), "weighted
    paper", "delta paper" (measured - paper), "delta grpo-n4" with its 95% low/high and `n_paired`, all
    in percent with one decimal.

    "delta grpo-n4" is the mean paired difference d_s = x_s - x_{grpo-n4,s} over the seeds both rows
    trained (same backbone, prompt set and seed: the same data order) with the same benchmarks measured,
    computed at full precision and then rounded; its interval is the t interval of the d_s, missing with
    one common seed (never a fake one). A released checkpoint or base model evaluated by name has no seed
    to pair: its "delta grpo-n4" is its value minus GRPO-n4's mean as shown, without an interval.
    "delta paper" is taken between the one-decimal values shown and needs all four paper benchmarks
    measured. `checkpoint` is "final" (each run's highest evaluated step) or a step number.
    `measured_only` drops the paper's rows that no run measured.
    """
    keys = list(GROUP_KEYS)
    if eval_df is None:
        eval_df = pd.DataFrame(columns=[*RUN_KEYS, "checkpoint_step", "benchmark", "problems", "k", "ave_at_k"])
    _require(eval_df, [*RUN_KEYS, "checkpoint_step", "benchmark", "ave_at_k"], "eval")
    selected = _filter_prompt_set(_select_checkpoint(eval_df, checkpoint), prompt_set)
    measured, measured_benchmarks, runs = _measured_rows(selected)
    paper_rows = _paper_rows(prompt_set)
    if measured_only:
        paper_rows = paper_rows.merge(measured[keys], on=keys, how="inner")
    table = paper_rows.merge(measured, on=keys, how="outer") if not paper_rows.empty else measured.copy()
    twins = _paper_twins(selected)
    has_paper = not paper_rows.empty or bool(twins)
    for column in (WEIGHTED_MEASURED, WEIGHTED_PAPER, *(f"{b} paper" for b in paper.BENCHMARKS if has_paper)):
        if column not in table.columns:
            table[column] = math.nan
    _fill_paper_twins(table, twins)
    table["n_seeds"] = pd.array(table["n_seeds"], dtype="Int64")

    columns = [*keys, "n_seeds"]
    for bench in _sorted_benchmarks([*measured_benchmarks, *(paper.BENCHMARKS if has_paper else ())]):
        columns += [c for c in (f"{bench} measured", f"{bench} paper") if c in table.columns]
    table = table[[*columns, WEIGHTED_MEASURED, WEIGHTED_PAPER]].copy()
    value_columns = [c for c in table.columns if c.endswith((" measured", " paper"))]
    table[value_columns] = table[value_columns].astype(float)

    full = [f"{b} measured" for b in paper.BENCHMARKS]
    complete = pd.Series(False, index=table.index)
    if all(c in table.columns for c in full):
        complete = table[full].notna().all(axis=1)
    table[DELTA_PAPER] = (table[WEIGHTED_MEASURED] - table[WEIGHTED_PAPER]).where(complete).round(1)

    by_seed = _by_seed(runs)
    unpaired = _unpaired_reference_delta(table, by_seed)
    _seed_intervals(table, by_seed)
    trained = set(map(tuple, by_seed.loc[by_seed["trained"].astype(bool), keys].itertuples(index=False)))
    untrained = pd.Series([tuple(k) not in trained for k in table[keys].itertuples(index=False)], index=table.index)
    # a trained row with no seed in common keeps a missing delta; only rows with no seed to pair use the means
    table[DELTA_REFERENCE] = pd.Series(table[DELTA_REFERENCE], dtype=float).where(~untrained, unpaired)

    interval_columns = [WEIGHTED_MEASURED + CI_LOW, WEIGHTED_MEASURED + CI_HIGH]
    delta_columns = [DELTA_REFERENCE, DELTA_REFERENCE + CI_LOW, DELTA_REFERENCE + CI_HIGH, N_PAIRED]
    order = [*columns, WEIGHTED_MEASURED, *interval_columns, WEIGHTED_PAPER, DELTA_PAPER, *delta_columns]
    table = _sort(table[order], keys)
    decimals = [*value_columns, *interval_columns, DELTA_PAPER, *delta_columns[:3]]
    table.attrs[_DECIMALS] = dict.fromkeys(decimals, 1)
    table.attrs[_MEASURED] = [c for c in table.columns if c.endswith(" measured")]
    return table


# ------------------------------------------------------------------------------------------ step time


def _measured_steps(training_df: pd.DataFrame, prompt_set: str | None) -> pd.DataFrame:
    if training_df is None:
        training_df = pd.DataFrame(columns=[*RUN_KEYS, "step"])
    _require(training_df, [*RUN_KEYS, "step"], "training")
    return _filter_prompt_set(training_df, prompt_set)


def step_time_table(
    training_df: pd.DataFrame | None, prompt_set: str | None = None, *, measured_only: bool = False
) -> pd.DataFrame:
    """Table 2: seconds per training step per (backbone, method), beside the paper's 8xH100 seconds.

    "seconds measured" is the mean of `timing_s/step` over each run's steps except step 1 (start-up),
    then over the runs (`n_runs`, every prompt set unless `prompt_set` is given); "relative measured"
    divides by the same backbone's GRPO-n4. The paper's columns come from paper_tables/step_time_8xh100.csv.
    """
    keys = ["backbone", "method"]
    frame = _measured_steps(training_df, prompt_set)
    seen = frame[keys].drop_duplicates()
    if STEP_TIMING in frame.columns:
        timed = frame.assign(**{STEP_TIMING: pd.to_numeric(frame[STEP_TIMING], errors="coerce")})
        timed = timed[(pd.to_numeric(timed["step"], errors="coerce") != 1) & timed[STEP_TIMING].notna()]
        per_run = timed.groupby([*keys, "run"])[STEP_TIMING].mean()
    else:
        per_run = pd.Series(dtype=float, index=pd.MultiIndex.from_tuples([], names=[*keys, "run"]))
    grouped = per_run.groupby(level=keys)
    measured = pd.concat([grouped.size().rename("n_runs"), grouped.mean().rename("seconds measured")], axis=1)
    measured = seen.merge(measured.reset_index(), on=keys, how="left") if not seen.empty else measured.reset_index()

    reported = paper.step_times()[[*keys, "seconds_per_step", "relative_to_grpo"]]
    reported = reported.rename(columns={"seconds_per_step": "seconds paper", "relative_to_grpo": "relative paper"})
    if measured_only:
        reported = reported.merge(measured[keys], on=keys, how="inner")
    table = reported.merge(measured, on=keys, how="outer")
    table["n_runs"] = pd.array(table["n_runs"], dtype="Int64")
    for column in ("seconds measured", "seconds paper", "relative paper"):
        table[column] = table[column].astype(float)
    reference = dict(
        zip(
            table["backbone"][table["method"] == REFERENCE_METHOD],
            table["seconds measured"][table["method"] == REFERENCE_METHOD],
            strict=True,
        )
    )
    ratio = table["seconds measured"] / table["backbone"].map(reference).astype(float)
    table["relative measured"] = ratio.round(2)
    table["seconds measured"] = table["seconds measured"].round(2)
    table = table[[*keys, "n_runs", "seconds measured", "seconds paper", "relative measured", "relative paper"]]
    table = _sort(table, keys)
    table.attrs[_DECIMALS] = {"seconds measured": 2, "seconds paper": 0, "relative measured": 2, "relative paper": 2}
    table.attrs[_MEASURED] = ["seconds measured", "relative measured"]
    return table


# ------------------------------------------------------------------------------------------ sampling

# column -> (decimals, x100)
SAMPLING_COLUMNS: dict[str, tuple[int, bool]] = {
    "responses per step": (1, False),
    "responses per prompt": (2, False),
    "signal share %": (1, True),
    "zero-variance share %": (1, True),
    "unresolved share %": (1, True),
    "additional samples per step": (1, False),
    "update responses per step": (1, False),
}


def _sampler_values(frame: pd.DataFrame) -> pd.DataFrame:
    """Per logged step, the sampling table's quantities (NaN where the run did not log them)."""

    def col(name: str) -> pd.Series:
        if name not in frame.columns:
            return pd.Series(math.nan, index=frame.index, dtype=float)
        return pd.to_numeric(frame[name], errors="coerce").astype(float)

    prompts = col("sampler/prompts").where(lambda s: s > 0)
    per_prompt = col("sampler/responses_per_prompt").combine_first(col("sampler/responses_total") / prompts)
    return pd.DataFrame(
        {
            "responses per step": col("sampler/responses_total"),
            "responses per prompt": per_prompt,
            "signal share %": col("sampler/signal_frac"),
            "zero-variance share %": col("sampler/zero_variance_frac"),
            "unresolved share %": col("sampler/unresolved") / prompts,
            "additional samples per step": col("sampler/additional_samples"),
            "update responses per step": col("sampler/update_size"),
        },
        index=frame.index,
    )


def sampling_table(training_df: pd.DataFrame | None, prompt_set: str | None = None) -> pd.DataFrame:
    """Sampling per (backbone, prompt_set, method), means over each run's steps, then over its seeds.

    Responses drawn per step and per prompt, the share of update groups with signal (both correct and
    wrong responses) and with zero variance, Seq's share of prompts left unresolved after all rounds
    (`sampler/unresolved` / `sampler/prompts`; missing for other methods), and the samples drawn beyond
    each prompt's first request, and the responses the policy update trains on (`sampler/update_size`:
    what a step costs the update, as against what it costs to generate). Shares are percentages. Only
    measured runs have rows.
    """
    keys = list(GROUP_KEYS)
    frame = _measured_steps(training_df, prompt_set)
    values = pd.concat([frame[[*keys, "run"]], _sampler_values(frame)], axis=1)
    columns = list(SAMPLING_COLUMNS)
    per_run = values.groupby([*keys, "run"], sort=False)[columns].mean()
    grouped = per_run.groupby(level=keys, sort=False)
    table = pd.concat([grouped.size().rename("n_seeds"), grouped.mean()], axis=1).reset_index()
    table["n_seeds"] = pd.array(table["n_seeds"], dtype="Int64")
    for column, (decimals, percent) in SAMPLING_COLUMNS.items():
        values = table[column].astype(float) * (100 if percent else 1)
        table[column] = values.round(decimals)
    table = _sort(table[[*keys, "n_seeds", *columns]], keys)
    table.attrs[_DECIMALS] = {c: d for c, (d, _) in SAMPLING_COLUMNS.items()}
    table.attrs[_MEASURED] = columns
    return table


# ------------------------------------------------------------------------------------------ missing


def row_label(row: pd.Series | dict) -> str:
    """ "backbone/prompt_set/method" (the key columns the row has)."""
    return "/".join(str(row[k]) for k in GROUP_KEYS if k in row)


def missing_measured(table: pd.DataFrame) -> list[str]:
    """Labels of the rows with no measured number at all (paper rows no run reproduced, runs without logs)."""
    measured = [c for c in table.attrs.get(_MEASURED, ()) if c in table.columns]
    measured = measured or [c for c in table.columns if str(c).endswith(" measured")]
    if not measured or table.empty:
        return []
    empty = table[measured].isna().all(axis=1)
    return [row_label(row) for _, row in table[empty].iterrows()]


# ------------------------------------------------------------------------------------------ renderers


def _is_missing(value: object) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _infer_decimals(values: pd.Series) -> int:
    best = 0
    for v in values.dropna().astype(float):
        if not math.isfinite(v):
            continue
        d = next((d for d in range(5) if abs(v - round(v, d)) < 1e-9), 4)
        best = max(best, d)
    return best


def _formatters(df: pd.DataFrame) -> list[tuple[bool, object]]:
    """Per column: (numeric, value -> text) for present values."""
    decimals = df.attrs.get(_DECIMALS, {})
    out = []
    for column in df.columns:
        series = df[column]
        if pd.api.types.is_bool_dtype(series):
            out.append((False, str))
        elif pd.api.types.is_integer_dtype(series):
            out.append((True, lambda v: str(int(v))))
        elif pd.api.types.is_float_dtype(series):
            d = decimals.get(column, _infer_decimals(series))
            signed = str(column).startswith("delta")
            out.append((True, _float_formatter(d, signed)))
        else:
            out.append((False, str))
    return out


def _float_formatter(decimals: int, signed: bool):
    def fmt(value: object) -> str:
        v = round(float(value), decimals)
        if v == 0:
            v = 0.0  # no "-0.0"
        return f"{v:+.{decimals}f}" if signed and v != 0 else f"{v:.{decimals}f}"

    return fmt


def _interval_pairs(columns: Sequence[str]) -> dict[int, str]:
    """Position of each "<x> 95% low" column followed by its "<x> 95% high" -> the shown header "<x> 95% CI"."""
    out = {}
    for i, column in enumerate(columns[:-1]):
        if column.endswith(CI_LOW) and columns[i + 1] == column.removesuffix(CI_LOW) + CI_HIGH:
            out[i] = column.removesuffix(CI_LOW) + CI_SHOWN
    return out


def _cells(df: pd.DataFrame, missing: str) -> tuple[list[str], list[list[str]], list[bool]]:
    """Headers, cell texts and numeric flags; an interval's low/high columns become one "[low, high]" cell."""
    formats = _formatters(df)
    headers = [str(c) for c in df.columns]
    numeric = [n for n, _ in formats]
    rows = []
    for values in df.itertuples(index=False):
        rows.append([missing if _is_missing(v) else f(v) for v, (_, f) in zip(values, formats, strict=True)])
    decimals = df.attrs.get(_DECIMALS, {})
    for i, header in sorted(_interval_pairs(headers).items(), reverse=True):
        plain = _float_formatter(decimals.get(headers[i], 1), signed=False)
        for row, values in zip(rows, df.itertuples(index=False), strict=True):
            low, high = values[i], values[i + 1]
            row[i : i + 2] = [missing if _is_missing(low) or _is_missing(high) else f"[{plain(low)}, {plain(high)}]"]
        headers[i : i + 2] = [header]
        numeric[i : i + 2] = [True]
    return headers, rows, numeric


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub pipe table; missing cells are "—", numbers right-aligned."""
    headers, rows, numeric = _cells(df, MISSING)

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    rule = "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)]) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "—": "--",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(df: pd.DataFrame) -> str:
    """A booktabs tabular (needs \\usepackage{booktabs}); missing cells are "--"."""
    headers, rows, numeric = _cells(df, MISSING)
    spec = "".join("r" if n else "l" for n in numeric)

    def line(cells: Sequence[str]) -> str:
        return " & ".join(MISSING_LATEX if c == MISSING else latex_escape(c) for c in cells) + r" \\"

    body = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", line(headers), r"\midrule"]
    body += [line(r) for r in rows]
    body += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(body) + "\n"


def to_csv(df: pd.DataFrame, path: str | os.PathLike[str] | None = None) -> str:
    """CSV text (numbers as computed, missing cells "—"); written atomically to `path` when given."""
    text = df.to_csv(index=False, na_rep=MISSING)
    if path is not None:
        from repro.atomic import write_text

        write_text(path, text)
    return text


def to_rich(df: pd.DataFrame, title: str | None = None):
    """A rich Table: numbers right-aligned and never cut, missing cells "—" (dim); headers wrap."""
    from rich import box
    from rich.table import Table

    headers, rows, numeric = _cells(df, MISSING)
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for i, (header, n) in enumerate(zip(headers, numeric, strict=True)):
        words = header.split(" ")
        widest = max([len(row[i]) for row in rows] + [len(w) for w in words])
        label = "\n".join(words) if n else header
        table.add_column(label, justify="right" if n else "left", no_wrap=True, min_width=widest)
    for row in rows:
        table.add_row(*(f"[dim]{MISSING}[/dim]" if c == MISSING else _rich_escape(c) for c in row))
    return table


def _rich_escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
