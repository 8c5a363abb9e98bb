"""REPORT's early-exit clauses (issue 46), beside the exit's "no loss" verdict (`no_loss.async_sentence`): the tokens
each step generated, paired by seed, and what the order-preserving rule keeps against what the first-returned cut
would have kept of the very same returns (the CPU trainer's `exit/*` sums, `repro.sampling.early_exit.BiasTally`).
"""

from __future__ import annotations

import pandas as pd

from repro.report import stats
from repro.sampling.metrics import GENERATED


def _runs(training: pd.DataFrame, backbone: str, prompt_set: str, method: str) -> pd.DataFrame:
    return training[
        (training["backbone"] == backbone) & (training["prompt_set"] == prompt_set) & (training["method"] == method)
    ]


def token_clause(training: pd.DataFrame, backbone: str, prompt_set: str, method: str, reference: str) -> str | None:
    """The change in tokens generated a step, per seed (each run's mean over its steps), as a percent of the
    reference's, with its t interval; None without both runs' tokens."""
    if GENERATED not in training:
        return None
    means = {
        name: _runs(training, backbone, prompt_set, name).groupby("seed")[GENERATED].mean()
        for name in (method, reference)
    }
    seeds = sorted(set(means[method].index) & set(means[reference].index))
    if not seeds:
        return None
    change = [100.0 * (means[method][s] / means[reference][s] - 1.0) for s in seeds]
    interval = stats.t_interval(change)
    mine, theirs = (float(means[name][seeds].mean()) for name in (method, reference))
    spread = f", 95% CI [{interval.low:+.1f}%, {interval.high:+.1f}%]" if interval.has_interval else ""
    return (
        f"Tokens generated a step: {interval.mean:+.1f}%{spread} over {interval.n} seeds "
        f"({mine:,.0f} vs {theirs:,.0f} a step, mean over the runs' steps)."
    )


def bias_clause(training: pd.DataFrame, backbone: str, prompt_set: str, method: str) -> str | None:
    """Mean reward and length of the responses each rule keeps from the batches the rule ended, summed over every
    step and seed, and the first-returned minus kept difference per seed with its interval."""
    runs = _runs(training, backbone, prompt_set, method)
    columns = [f"exit/{rule}_{what}" for rule in ("kept", "first_returned") for what in ("responses", "reward_sum")]
    columns += ["exit/kept_length_sum", "exit/first_returned_length_sum", "exit/decided_batches"]
    if runs.empty or not set(columns) <= set(runs.columns):
        return None
    sums = runs.groupby("seed")[columns].sum()
    if sums["exit/decided_batches"].sum() == 0:
        return None

    def mean(frame, rule: str, what: str):
        return frame[f"exit/{rule}_{what}_sum"] / frame[f"exit/{rule}_responses"]

    total = sums.sum()
    reward_gap = stats.t_interval((mean(sums, "first_returned", "reward") - mean(sums, "kept", "reward")).tolist())
    length_gap = stats.t_interval((mean(sums, "first_returned", "length") - mean(sums, "kept", "length")).tolist())

    def gap(interval: stats.Interval, scale: float, unit: str) -> str:
        if not interval.has_interval:
            return f"{scale * interval.mean:+.2f}{unit} (one seed)"
        return f"{scale * interval.mean:+.2f}{unit} [{scale * interval.low:+.2f}, {scale * interval.high:+.2f}]"

    return (
        f"Bias, measured on the same returns ({int(total['exit/decided_batches']):,} batches the rule ended, "
        f"{len(sums)} seeds): the order-preserving prefix kept {int(total['exit/kept_responses']):,} responses, "
        f"mean reward {mean(total, 'kept', 'reward'):.3f} and {mean(total, 'kept', 'length'):.2f} tokens; the "
        f"first-returned cut would have kept {int(total['exit/first_returned_responses']):,}, mean reward "
        f"{mean(total, 'first_returned', 'reward'):.3f} and {mean(total, 'first_returned', 'length'):.2f} tokens "
        f"(first-returned minus kept, per seed: reward {gap(reward_gap, 100.0, ' points')}, length "
        f"{gap(length_gap, 1.0, ' tokens')})."
    )
