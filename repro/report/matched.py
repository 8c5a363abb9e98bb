"""The bench's compute axis: held-out accuracy against the tokens a run generated (issue 36).

Papers on adaptive sampling compare at mismatched compute: per step, a method that draws 16 responses per
prompt spends four times GRPO-n4's generation, and one that discards samples looks better per step than per
token. Here every run logs the tokens it generated each step (`tokens/generated`, both engines) and
`repro collect` sums them (`tokens/generated_cumulative`), so each evaluated checkpoint has a compute
coordinate. The accuracy read there (`curve`): the held-out accuracy a run logs while it trains
(`heldout/accuracy`, every few steps, the CPU trainer's; `heldout_by_tokens`) when runs logged it, since it
gives every run a point every few steps at no extra cost; else the weighted Ave@k of evaluated checkpoints
(`accuracy_by_tokens`), which exist only where `repro eval` ran. Readings:
- `at_equal_tokens`: per backbone and prompt set, the budget is the smallest method's total (the most any of
  its seeds' runs generated, so that method is read at every seed's final checkpoint), and each method is read
  at its last checkpoint within that budget, seed by seed, with the t interval over seeds. A method whose
  first checkpoint already exceeds the budget has no reading there ("over budget"), rather than one taken at
  more compute.
- `paired_at_equal_tokens`: two methods seed by seed, each seed's budget the smaller of the two runs' totals,
  the difference of their last readings within it (what the bench's verdicts use, repro.report.bench).
"""

from __future__ import annotations

import math

import pandas as pd

from repro.report import stats
from repro.report.schema import GENERATED_CUMULATIVE, HELDOUT, WEIGHTED_AVERAGE

KEYS = ["backbone", "prompt_set", "method"]
COLUMNS = ["run", *KEYS, "seed", "step", "tokens", "ave"]
HELDOUT_WHAT = "held-out accuracy logged while training"
CHECKPOINT_WHAT = "weighted Ave@k of evaluated checkpoints"


def accuracy_by_tokens(eval_df: pd.DataFrame, training_df: pd.DataFrame) -> pd.DataFrame:
    """One row per trained run x evaluated checkpoint: RUN_KEYS, step, tokens (generated up to and including
    that step) and ave (the weighted average, percent). Runs that logged no tokens are left out."""
    if training_df is None or GENERATED_CUMULATIVE not in training_df.columns:
        return pd.DataFrame(columns=COLUMNS)
    tokens = training_df[["run", "step", GENERATED_CUMULATIVE]].dropna()
    rows = eval_df[(eval_df["benchmark"] == WEIGHTED_AVERAGE) & (eval_df["checkpoint_step"] > 0)]
    if "origin" in rows.columns:  # base models and released checkpoints have no training run
        rows = rows[rows["origin"].isna() | (rows["origin"] == "run")]
    merged = rows.merge(tokens, left_on=["run", "checkpoint_step"], right_on=["run", "step"], how="inner")
    out = merged.assign(tokens=merged[GENERATED_CUMULATIVE], ave=100.0 * merged["ave_at_k"])
    return out[COLUMNS].sort_values(["run", "step"], kind="stable").reset_index(drop=True)


def heldout_by_tokens(training_df: pd.DataFrame | None) -> pd.DataFrame:
    """One row per run x step that logged held-out accuracy and generated tokens: the columns of
    `accuracy_by_tokens`, `ave` the held-out accuracy in percent."""
    needed = {GENERATED_CUMULATIVE, HELDOUT}
    if training_df is None or not needed <= set(training_df.columns):
        return pd.DataFrame(columns=COLUMNS)
    rows = training_df.dropna(subset=[GENERATED_CUMULATIVE, HELDOUT])
    out = rows.assign(tokens=rows[GENERATED_CUMULATIVE], ave=100.0 * rows[HELDOUT])
    return out[COLUMNS].sort_values(["run", "step"], kind="stable").reset_index(drop=True)


def curve(eval_df: pd.DataFrame, training_df: pd.DataFrame | None) -> tuple[pd.DataFrame, str]:
    """(the points accuracy is read at, what they measure): the held-out curve where any run logged one, else
    the evaluated checkpoints (the module docstring says why)."""
    heldout = heldout_by_tokens(training_df)
    if not heldout.empty:
        return heldout, HELDOUT_WHAT
    return accuracy_by_tokens(eval_df, training_df), CHECKPOINT_WHAT


def _last_within(rows: pd.DataFrame, budget: float) -> pd.Series | None:
    within = rows[rows["tokens"] <= budget]
    return None if within.empty else within.sort_values("step").iloc[-1]


def paired_at_equal_tokens(
    points: pd.DataFrame, backbone: str, prompt_set: str, method: str, reference: str
) -> tuple[list[float], list[dict]]:
    """(d_s, one record per seed: budget, steps and values) for `method` - `reference` at equal generated
    tokens: for each seed both ran, the budget is the smaller of the two runs' final token totals and each is
    read at its last point within it. A seed where either has no point within the budget is left out."""
    cell = points[(points["backbone"] == backbone) & (points["prompt_set"] == prompt_set)]
    runs = {name: dict(tuple(cell[cell["method"] == name].groupby("seed"))) for name in (method, reference)}
    diffs, records = [], []
    for seed in sorted(set(runs[method]) & set(runs[reference])):
        mine, theirs = runs[method][seed], runs[reference][seed]
        budget = min(float(mine["tokens"].max()), float(theirs["tokens"].max()))
        a, b = _last_within(mine, budget), _last_within(theirs, budget)
        if a is None or b is None:
            continue
        diffs.append(float(a["ave"]) - float(b["ave"]))
        records.append({"seed": int(seed), "budget": budget, "step": int(a["step"]), "reference_step": int(b["step"])})
    return diffs, records


def at_equal_tokens(points: pd.DataFrame) -> pd.DataFrame:
    """Per backbone x prompt set x method: the budget (tokens), the accuracy each seed reached within it (its
    last checkpoint at or under the budget), their mean and 95% t interval, the seeds read and the steps."""
    out = []
    for (backbone, prompt_set), cell in points.groupby(["backbone", "prompt_set"], sort=True):
        finals = cell.sort_values("step").groupby("run").tail(1)
        totals = finals.groupby("method")["tokens"].max()
        budget = float(totals.min())
        for method, rows in cell.groupby("method", sort=True):
            within = rows[rows["tokens"] <= budget].sort_values("step").groupby("run").tail(1)
            interval = stats.t_interval(within["ave"].tolist())
            out.append(
                {
                    "backbone": backbone,
                    "prompt_set": prompt_set,
                    "method": method,
                    "budget_tokens": budget,
                    "method_tokens": float(totals[method]),
                    "ave": interval.mean,
                    "low": interval.low,
                    "high": interval.high,
                    "seeds": interval.n,
                    "seeds_run": int(rows["run"].nunique()),
                    "steps": ",".join(str(int(s)) for s in sorted(set(within["step"]))),
                }
            )
    return pd.DataFrame(
        out,
        columns=[*KEYS, "budget_tokens", "method_tokens", "ave", "low", "high", "seeds", "seeds_run", "steps"],
    )


def _tokens(value: float) -> str:
    return f"{value / 1e6:.2f}M" if value >= 1e5 else f"{value:,.0f}"


def section_lines(eval_df: pd.DataFrame, training_df: pd.DataFrame | None) -> list[str]:
    """REPORT.md's "at equal generated tokens" section, or nothing when no run logged its tokens."""
    points, what = curve(eval_df, training_df) if training_df is not None else (pd.DataFrame(), "")
    if points.empty:
        return []
    lines = [
        "## Beyond the paper: accuracy at equal generated tokens",
        "",
        f"Read from the {what}. Per backbone and prompt set, the budget is the smallest method's generated "
        "tokens (the most any of its seeds' runs generated); each method is read at its last point within that "
        "budget, seed by seed, with the 95% t interval over seeds. A method with no point within the budget is "
        "over budget there.",
        "",
    ]
    if what == HELDOUT_WHAT:
        lines[-1:-1] = [
            "The held-out accuracy is the CPU trainer's: a slice of the test tiers, a few samples a problem, "
            "every few steps (repro.local.heldout), so it is noisier than the Ave@k of the tables above and "
            "is what gives every run a reading at any budget without evaluating every checkpoint.",
            "",
        ]
    for (backbone, prompt_set), rows in at_equal_tokens(points).groupby(["backbone", "prompt_set"], sort=True):
        budget = float(rows["budget_tokens"].iloc[0])
        lines.append(f"- {backbone}, {prompt_set}, budget {_tokens(budget)} generated tokens:")
        for row in rows.sort_values("ave", ascending=False, na_position="last").itertuples():
            if row.seeds == 0:
                lines.append(f"  - {row.method}: over budget (its first point needs more tokens)")
                continue
            spread = f" [{row.low:.1f}, {row.high:.1f}]" if not math.isnan(row.low) else ""
            lines.append(
                f"  - {row.method}: {row.ave:.1f}{spread} over {row.seeds} of {row.seeds_run} seeds (step {row.steps};"
                f" its runs generated up to {_tokens(row.method_tokens)})"
            )
    lines.append("")
    return lines
