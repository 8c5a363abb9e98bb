"""The comparisons REPORT.md judges (the paper's claims, and beyond the paper the async schedule and the early exit
against their synchronous method), the paper's side of each, and the clauses every comparison's sentence shares:
the measured paired difference and the step-time ratio."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from repro import paper
from repro.report import stats, tables
from repro.report.verdicts import interval_text, points_text

PAPER_STAND_IN = paper.PAPER_STAND_IN  # the paper's backbone a miniature is compared against

LABELS = {
    "grpo-n4": "GRPO-n4",
    "grpo-n8": "GRPO-n8",
    "grpo-n16": "GRPO-n16",
    "dapo": "DAPO",
    "seq-pos": "Seq-pos",
    "seq-balance": "Seq-balance",
    "est": "Est",
    "pods-16-4": "PODS-16-4",
    "knapsack": "Knapsack RL",
    "greso": "GRESO",
}


@dataclass(frozen=True)
class Comparison:
    """One claim of the paper: `method` against `reference` on `prompt_set`; `cost` adds the cost ratios."""

    method: str
    reference: str
    prompt_set: str = "standard"
    cost: bool = False

    @property
    def title(self) -> str:
        where = " on the hard prompt set" if self.prompt_set == "hard" else ""
        return f"{_label(self.method)} vs {_label(self.reference)}{where}"


COMPARISONS = (
    Comparison("seq-balance", "grpo-n4"),
    Comparison("seq-balance", "grpo-n16", cost=True),
    Comparison("seq-pos", "seq-balance"),
    Comparison("est", "grpo-n4"),
    Comparison("seq-balance", "grpo-n4", prompt_set="hard"),
)


# Beyond the paper: the async schedule against its synchronous method, judged against "no loss".
ASYNC_COMPARISONS = (Comparison("seq-balance-async", "seq-balance"),)
# Beyond the paper: the early exit against the same method without it (issue 46), judged against "no loss".
EXIT_COMPARISONS = (Comparison("seq-balance-exit", "seq-balance"),)


def _label(method: str) -> str:
    from repro.catalog import ASYNC_SUFFIX

    base = method.removesuffix(ASYNC_SUFFIX)
    if base != method and base in LABELS:
        return LABELS[base] + " async"
    return LABELS.get(method, method)


def _step_seconds(
    step_time: pd.DataFrame | None, backbone: str, comparison: Comparison
) -> tuple[str, float, float] | None:
    """(ratio text, method's seconds per step, reference's) from `tables.step_time_table`, None if unmeasured."""
    if step_time is None or step_time.empty:
        return None
    cell = step_time[step_time["backbone"] == backbone]
    rows = {m: cell[cell["method"] == m] for m in (comparison.method, comparison.reference)}
    if not all(len(r) == 1 for r in rows.values()):
        return None
    mine, theirs = (float(rows[m]["seconds measured"].iloc[0]) for m in (comparison.method, comparison.reference))
    ratio = _ratio(mine, theirs)
    return None if ratio is None else (ratio, mine, theirs)


def _paper_weighted() -> dict[tuple[str, str, str], float]:
    """(backbone, prompt_set, method) -> the paper's weighted Ave@32 (Table 1, then the all-methods summary)."""
    out: dict[tuple[str, str, str], float] = {}
    for frame in (paper.weighted_averages(), paper.table1()):  # Table 1 last: it wins where both report
        for backbone, prompt_set, method, value in frame[[*tables.GROUP_KEYS, "weighted_average"]].itertuples(
            index=False
        ):
            out[(str(backbone), str(prompt_set), str(method))] = float(value)
    return out


def paper_difference(backbone: str, comparison: Comparison) -> tuple[float | None, float | None, float | None, str]:
    """(paper delta, paper method value, paper reference value, the paper backbone used): the backbone itself
    when the paper trained it, else PAPER_STAND_IN. Values are None where the paper reports none."""
    reported = _paper_weighted()
    backbones = {key[0] for key in reported}
    source = backbone if backbone in backbones else PAPER_STAND_IN
    mine = reported.get((source, comparison.prompt_set, comparison.method))
    theirs = reported.get((source, comparison.prompt_set, comparison.reference))
    delta = None if mine is None or theirs is None else round(mine - theirs, 1)
    return delta, mine, theirs, source


def difference_text(interval: stats.Interval) -> str:
    """A paired difference over seeds in REPORT.md's words, shared by its measured clause and its base-model
    sentence: `verdicts.interval_text`'s, but for one seed, which the paper's comparisons word as here."""
    if not interval.has_interval:
        return f"{points_text(interval.mean)} points on 1 seed (one seed: no interval)"
    return interval_text(interval)


def _measured_clause(by_seed: pd.DataFrame, backbone: str, comparison: Comparison) -> tuple[str, stats.Interval]:
    interval = tables.paired_difference(
        by_seed, backbone, comparison.prompt_set, comparison.method, comparison.reference
    )
    trained = by_seed[(by_seed["backbone"] == backbone) & (by_seed["prompt_set"] == comparison.prompt_set)]
    trained = trained[trained["trained"].astype(bool)]
    absent = [m for m in (comparison.method, comparison.reference) if not (trained["method"] == m).any()]
    if absent:
        cells = " and ".join(f"{backbone}/{comparison.prompt_set}/{m}" for m in absent)
        return f"not measured (no trained run of {cells})", interval
    if interval.n == 0:
        return "no seed measured by both runs on the same benchmarks, so no paired difference", interval
    if not interval.has_interval:
        return f"measured difference {difference_text(interval)}", interval
    return f"measured paired difference {difference_text(interval)}", interval


def _ratio(mine: float, theirs: float) -> str | None:
    if not (math.isfinite(mine) and math.isfinite(theirs)) or theirs <= 0:
        return None
    return f"{mine / theirs:.2f}x"
