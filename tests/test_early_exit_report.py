"""REPORT's early-exit clauses (issue 46) against numbers written out: the tokens a step, paired by seed, and what
each rule keeps of the same returns, summed over steps and seeds."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.report import early_exit, stats


def _rows(method: str, seed: int, tokens: list[float], **sums: list[float]) -> list[dict]:
    return [
        {"backbone": "tiny-arith", "prompt_set": "standard", "method": method, "seed": seed, "step": step + 1,
         "tokens/generated": value, **{f"exit/{k}": v[step] for k, v in sums.items()}}
        for step, value in enumerate(tokens)
    ]  # fmt: skip


def _frame() -> pd.DataFrame:
    exit_sums = {
        "decided_batches": [2, 3],
        "kept_responses": [8, 12],  # 20 kept: 10 correct, 100 tokens
        "kept_reward_sum": [4, 6],
        "kept_length_sum": [40, 60],
        "first_returned_responses": [10, 10],  # 20 returned first: 12 correct, 80 tokens
        "first_returned_reward_sum": [6, 6],
        "first_returned_length_sum": [40, 40],
    }
    other = {k: [2 * v for v in values] for k, values in exit_sums.items()}  # seed 1: the same means
    rows = _rows("seq-balance-exit", 0, [90.0, 90.0], **exit_sums) + _rows("seq-balance", 0, [100.0, 100.0])
    rows += _rows("seq-balance-exit", 1, [80.0, 80.0], **other) + _rows("seq-balance", 1, [100.0, 100.0])
    return pd.DataFrame(rows)


def test_the_token_clause_pairs_each_seeds_mean_tokens_a_step() -> None:
    text = early_exit.token_clause(_frame(), "tiny-arith", "standard", "seq-balance-exit", "seq-balance")
    interval = stats.t_interval([-10.0, -20.0])
    assert text == (
        f"Tokens generated a step: -15.0%, 95% CI [{interval.low:+.1f}%, {interval.high:+.1f}%] over 2 seeds "
        "(85 vs 100 a step, mean over the runs' steps)."
    )
    assert interval.low == pytest.approx(-15.0 - 12.706 * 5.0, rel=1e-4)  # s = 7.07, s / sqrt(2) = 5


def test_the_bias_clause_sums_every_step_and_seed() -> None:
    text = early_exit.bias_clause(_frame(), "tiny-arith", "standard", "seq-balance-exit")
    # 60 kept (30 correct, 300 tokens) vs 60 first-returned (36 correct, 240 tokens) over 15 batches; each seed
    # alike, so the per-seed differences have no spread: +10 points of reward, -1 token
    assert text.startswith(
        "Bias, measured on the same returns (15 batches the rule ended, 2 seeds): the order-preserving prefix kept "
        "60 responses, mean reward 0.500 and 5.00 tokens; the first-returned cut would have kept 60, mean reward "
        "0.600 and 4.00 tokens (first-returned minus kept, per seed: reward +10.00 points"
    )
    assert "length -1.00 tokens" in text
    assert early_exit.bias_clause(_frame(), "tiny-arith", "standard", "seq-balance") is None  # no exit sums
