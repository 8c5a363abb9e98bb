"""The bench's compute axis: held-out accuracy against the tokens a run generated (issue 36).

Papers on adaptive sampling compare at mismatched compute: per step, a method that draws 16 responses per
prompt spends four times GRPO-n4's generation, and one that discards samples looks better per step than per
token. Here every run logs the tokens it generated each step (`tokens/generated`, both engines) and
`repro collect` sums them (`tokens/generated_cumulative`), so each evaluated checkpoint has a compute
coordinate. Two readings:
- `accuracy_by_tokens`: per run and checkpoint, (cumulative generated tokens, weighted Ave@k), what the
  figure draws;
- `at_equal_tokens`: per backbone and prompt set, the budget is the smallest method's total (the most any of
  its seeds' runs generated, so that method is read at every seed's final checkpoint), and each method is read
  at its last checkpoint within that budget, seed by seed, with the t interval over seeds. A method whose
  first checkpoint already exceeds the budget has no reading there ("over budget"), rather than one taken at
  more compute.
"""

from __future__ import annotations

import math

import pandas as pd

from repro.report import stats
from repro.report.collect import GENERATED_CUMULATIVE
from repro.report.schema import WEIGHTED_AVERAGE

KEYS = ["backbone", "prompt_set", "method"]


def accuracy_by_tokens(eval_df: pd.DataFrame, training_df: pd.DataFrame) -> pd.DataFrame:
    """One row per trained run x evaluated checkpoint: RUN_KEYS, step, tokens (generated up to and including
    that step) and ave (the weighted average, percent). Runs that logged no tokens are left out."""
    columns = ["run", *KEYS, "seed", "step", "tokens", "ave"]
    if training_df is None or GENERATED_CUMULATIVE not in training_df.columns:
        return pd.DataFrame(columns=columns)
    tokens = training_df[["run", "step", GENERATED_CUMULATIVE]].dropna()
    rows = eval_df[(eval_df["benchmark"] == WEIGHTED_AVERAGE) & (eval_df["checkpoint_step"] > 0)]
    if "origin" in rows.columns:  # base models and released checkpoints have no training run
        rows = rows[rows["origin"].isna() | (rows["origin"] == "run")]
    merged = rows.merge(tokens, left_on=["run", "checkpoint_step"], right_on=["run", "step"], how="inner")
    out = merged.assign(tokens=merged[GENERATED_CUMULATIVE], ave=100.0 * merged["ave_at_k"])
    return out[columns].sort_values(["run", "step"], kind="stable").reset_index(drop=True)


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
    points = accuracy_by_tokens(eval_df, training_df) if training_df is not None else pd.DataFrame()
    if points.empty:
        return []
    lines = [
        "## Beyond the paper: accuracy at equal generated tokens",
        "",
        "Per backbone and prompt set, the budget is the smallest method's generated tokens (the most any of its "
        "seeds' runs generated); each method is read at its last evaluated checkpoint within "
        "that budget, seed by seed, with the 95% t interval over seeds. A method with no checkpoint within the "
        "budget is over budget there; evaluating more checkpoints (`repro eval RUN --all-checkpoints`) gives it "
        "one.",
        "",
    ]
    for (backbone, prompt_set), rows in at_equal_tokens(points).groupby(["backbone", "prompt_set"], sort=True):
        budget = float(rows["budget_tokens"].iloc[0])
        lines.append(f"- {backbone}, {prompt_set}, budget {_tokens(budget)} generated tokens:")
        for row in rows.sort_values("ave", ascending=False, na_position="last").itertuples():
            if row.seeds == 0:
                lines.append(f"  - {row.method}: over budget (its first checkpoint needs more tokens)")
                continue
            spread = f" [{row.low:.1f}, {row.high:.1f}]" if not math.isnan(row.low) else ""
            lines.append(
                f"  - {row.method}: {row.ave:.1f}{spread} over {row.seeds} of {row.seeds_run} seeds (step {row.steps};"
                f" its runs generated up to {_tokens(row.method_tokens)})"
            )
    lines.append("")
    return lines
