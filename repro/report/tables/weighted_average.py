"""Table 1: Ave@k per benchmark and the weighted average, measured beside the paper, with the intervals over
seeds and the paired difference to the reference method (`repro.report.tables.seeds`)."""

from __future__ import annotations

import math

import pandas as pd

from repro import paper
from repro.errors import ReproError
from repro.report import stats
from repro.report.schema import RELEASED_SUFFIX, RUN_KEYS, require_columns
from repro.report.tables.common import (
    _DECIMALS,
    _MEASURED,
    CI_HIGH,
    CI_LOW,
    DELTA_PAPER,
    DELTA_REFERENCE,
    GROUP_KEYS,
    N_PAIRED,
    REFERENCE_METHOD,
    WEIGHTED_MEASURED,
    WEIGHTED_PAPER,
    _filter_prompt_set,
    _select_checkpoint,
    _sort,
    _sorted_benchmarks,
)
from repro.report.tables.seeds import _by_seed, _measured_rows, paired_difference


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
    require_columns(eval_df, [*RUN_KEYS, "checkpoint_step", "benchmark", "ave_at_k"], "eval")
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
