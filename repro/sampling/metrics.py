"""Per-step sampler metrics, named once here so every driver logs the same keys.

The paper's Figure 5 reads these: additional samples, prompts still active after each round (split
into missing positives and missing negatives), prompts resolved within two rounds.
"""

from __future__ import annotations

import numpy as np

from repro.sampling.advantage import group_stats
from repro.sampling.result import StepResult
from repro.sampling.rules import required_negatives, required_positives

PREFIX = "sampler"
GENERATED = "tokens/generated"  # the tokens a step generated (both engines): the compute axis, a run's token budget


def step_metrics(
    result: StepResult,
    *,
    first_request: np.ndarray,
    first_draw_reward: np.ndarray | None = None,
    initial_prompts: int,
) -> dict[str, float]:
    """The keys every method logs; a policy adds its family's own (`seq_metrics`, `dapo_metrics`, `est_metrics`)."""
    spec = result.spec
    size = result.pool_size
    total = int(size.sum())
    m: dict[str, float] = {
        f"{PREFIX}/prompts": float(size.size),
        f"{PREFIX}/responses_total": float(total),
        f"{PREFIX}/responses_per_prompt": total / max(initial_prompts, 1),
        f"{PREFIX}/pool_size_mean": float(size.mean()),
        f"{PREFIX}/pool_size_max": float(size.max()),
        # beyond each initial prompt's first request: later rounds (Seq) or refill batches (DAPO)
        f"{PREFIX}/additional_samples": float(total - first_request[:initial_prompts].sum()),
        f"{PREFIX}/pool_reward_mean": float(np.sum(result.pool_mean * size) / max(total, 1)),
    }
    if first_draw_reward is not None:
        # Each prompt's first request is sized before any of its rewards is seen (n for GRPO, round 1 for Seq,
        # the allocation for Est, n for each DAPO draw), so the mean of its rewards is an unbiased estimate of
        # the prompt's pass rate; averaged over prompts with equal weight it is the policy's mean pass rate
        # on the step's prompts whatever the method. The pool mean is not: Seq keeps drawing on hard prompts
        # and weights them by how much it drew.
        drawn = (first_request > 0) & ~(result.failed if result.failed is not None else np.zeros(size.size, bool))
        m[f"{PREFIX}/first_draw_reward_mean"] = float(first_draw_reward[drawn].mean()) if drawn.any() else 0.0
    rows = result.reward.size
    inc = result.included
    failed = result.failed if result.failed is not None else np.zeros(size.size, dtype=bool)
    m[f"{PREFIX}/failed_prompts"] = float(failed.sum())  # generation failed after retries: no update group
    m[f"{PREFIX}/update_size"] = float(rows)
    m[f"{PREFIX}/update_prompts"] = float(inc.sum())
    m[f"{PREFIX}/update_reward_mean"] = float(result.reward.mean()) if rows else 0.0
    if rows:
        _, _, std = group_stats(result.slot, result.reward, size.size)
        zero_var = inc & (std == 0)
        m[f"{PREFIX}/zero_variance_frac"] = float(zero_var.sum() / max(inc.sum(), 1))
        positive = result.reward > spec.positive_threshold
        n_pos = np.bincount(result.slot, weights=positive, minlength=size.size)
        n_all = np.bincount(result.slot, minlength=size.size)
        mixed = inc & (n_pos > 0) & (n_pos < n_all)
        m[f"{PREFIX}/signal_frac"] = float(mixed.sum() / max(inc.sum(), 1))
    else:
        m[f"{PREFIX}/zero_variance_frac"] = 0.0
        m[f"{PREFIX}/signal_frac"] = 0.0
    return m


def seq_metrics(result: StepResult) -> dict[str, float]:
    """Figure 5's counts: prompts still active after each round, and why the unresolved ones are."""
    spec = result.spec
    size = result.pool_size
    failed = result.failed if result.failed is not None else np.zeros(size.size, dtype=bool)
    m: dict[str, float] = {}
    exit_round = result.exit_round
    unresolved = (exit_round == 0) & ~failed  # a failed prompt is counted as failed, not as unresolved
    for t in range(1, spec.max_rounds + 1):
        m[f"{PREFIX}/active_after_round_{t}"] = float(np.sum(unresolved | (exit_round > t)))
    m[f"{PREFIX}/resolved_within_2_rounds"] = float(np.sum((exit_round >= 1) & (exit_round <= 2)))
    missing_pos = unresolved & (result.pool_positives < required_positives(spec))
    missing_neg = unresolved & ~missing_pos & (size - result.pool_positives < required_negatives(spec))
    m[f"{PREFIX}/unresolved"] = float(unresolved.sum())
    m[f"{PREFIX}/unresolved_missing_pos"] = float(missing_pos.sum())
    m[f"{PREFIX}/unresolved_missing_neg"] = float(missing_neg.sum())
    return m


def dapo_metrics(result: StepResult, *, initial_prompts: int, gen_batches: int) -> dict[str, float]:
    """What DAPO's refills drew and what its filter threw away."""
    size = result.pool_size
    inc = result.included
    m: dict[str, float] = {}
    mixed_pool = inc | ((size > 1) & (result.pool_positives > 0) & (result.pool_positives < size))
    all_pos = (result.pool_positives == size) & ~inc
    m["dapo/num_gen_batches"] = float(gen_batches)
    m["dapo/prompts_drawn"] = float(size.size)
    m["dapo/kept_prompts"] = float(inc.sum())
    m["dapo/dropped_all_correct"] = float(np.sum(all_pos & ~mixed_pool))
    m["dapo/dropped_all_wrong"] = float(np.sum((result.pool_positives == 0) & ~mixed_pool))
    m["dapo/discarded_surplus"] = float(np.sum(mixed_pool & ~inc))
    m["dapo/cap_hit"] = float(inc.sum() < initial_prompts)
    return m


def est_metrics(result: StepResult, p_hat: np.ndarray) -> dict[str, float]:
    """The estimator's allocation and weights, and how well its p_hat matched the pools it sized."""
    size = result.pool_size
    m: dict[str, float] = {}
    observed = result.pool_positives / np.maximum(size, 1)
    m["est/p_hat_mean"] = float(p_hat.mean())
    m["est/p_hat_min"] = float(p_hat.min())
    m["est/p_hat_max"] = float(p_hat.max())
    m["est/alloc_min"] = float(size.min())
    m["est/alloc_mean"] = float(size.mean())
    m["est/alloc_max"] = float(size.max())
    m["est/weight_min"] = float(result.weight.min())
    m["est/weight_max"] = float(result.weight.max())
    m["est/calibration_mae"] = float(np.abs(p_hat - observed).mean())
    m["est/calibration_bias"] = float((p_hat - observed).mean())
    return m
