"""Each run's weighted Ave@k, one row per seed, and the differences read seed by seed from it: against the same
backbone and prompt set's reference method (same seed, so the same data order) and against the base model. Table 1
prints them; `repro report` judges them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from repro.report import stats
from repro.report.schema import BASE_MODEL_LABEL, ORIGIN_RUN, RUN_KEYS, WEIGHTED_AVERAGE, require_columns
from repro.report.tables.common import (
    GROUP_KEYS,
    REFERENCE_METHOD,
    WEIGHTED_MEASURED,
    _filter_prompt_set,
    _percent,
    _select_checkpoint,
    _sorted_benchmarks,
)


def _is_trained(frame: pd.DataFrame) -> pd.Series:
    """Rows of trained runs (not a released checkpoint or base model evaluated by name): only these pair by seed."""
    if "origin" not in frame.columns:
        return pd.Series(True, index=frame.index)
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
    require_columns(eval_df, [*RUN_KEYS, "checkpoint_step", "benchmark", "ave_at_k"], "eval")
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
