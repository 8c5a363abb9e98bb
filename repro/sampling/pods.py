"""PODS's down-sampling (Xu et al. 2025, github YixuanEvenXu/pods at 187f43b): generate n responses per
prompt, update on the m of them whose rewards have the largest variance.

The rule is the single-GPU trainer's (trainer/maxvargrpo_trainer.py:515-533, the reference): sort the rewards
in descending order, start from the top m, and try every split "top i + bottom m - i" for i = 0..m-1, keeping
a candidate only when its variance is strictly larger. Candidates are met in the order i = m, 0, 1, ..., m-1,
so the first one reaching the largest variance wins; with all rewards equal the top m are kept. The advantage
is over the kept m alone: (r - mean) / (std + 1e-4), with the unbiased std (:529-533).

Two divergences, both chosen and tested:
- per prompt: the authors' code selects over the whole per-process reward vector, which is one prompt's
  group only because their config has one prompt per device (config/train.yaml:46); here each prompt's group
  is selected on its own, as the paper describes;
- ties between equal rewards: `torch.sort` is not stable, so which of several equal rewards the authors keep
  depends on the device; here the lower response index comes first (a stable sort). The kept rewards, their
  variance and advantages are the same either way.
The multi-GPU trainer (open-r1/src/open_r1/grpo_trainer.py:1106-1116) writes its improvements into a view of
the sorted indices, so it stops at the first candidate better than the top m and, when n < 2m, can keep a
response twice; it is not followed.
"""

from __future__ import annotations

import numpy as np

STD_EPSILON = 1e-4  # trainer/maxvargrpo_trainer.py:533


def max_variance_subset(rewards: np.ndarray, m: int) -> np.ndarray:
    """Indices (into `rewards`) of the m responses PODS keeps, in the order the rule assembles them."""
    rewards = np.asarray(rewards, dtype=float)
    if not 1 <= m <= rewards.size:
        raise ValueError(f"cannot keep m={m} of {rewards.size} responses")
    order = np.argsort(-rewards, kind="stable")  # descending; equal rewards by index (module doc)
    kept = order[:m]
    best = _variance(rewards[kept])
    for top in range(m):
        candidate = np.concatenate([order[:top], order[top - m :]])  # top i, then the bottom m - i
        variance = _variance(rewards[candidate])
        if variance > best:
            best, kept = variance, candidate
    return kept


def max_variance_subsets(rewards: np.ndarray, m: int) -> np.ndarray:
    """`max_variance_subset` of every row of `rewards` ([prompts, responses]) at once: [prompts, m] indices.

    The same numbers: each candidate's variance is numpy's over a contiguous last axis, which sums a row as it
    sums a 1-d array (tests/test_pods_batch.py holds it to the row-by-row rule), and the first candidate met
    with the largest float32 variance is the first argmax. A row whose variances hold a NaN goes row by row
    (a NaN never wins the rule's `>`, but wins argmax)."""
    rewards = np.asarray(rewards, dtype=float)
    prompts, size = rewards.shape
    if not 1 <= m <= size:
        raise ValueError(f"cannot keep m={m} of {size} responses")
    order = np.argsort(-rewards, axis=1, kind="stable")
    # candidate 0: the top m; candidate 1 + i: the top i, then the bottom m - i
    columns = np.array([list(range(m))] + [list(range(top)) + list(range(size - m + top, size)) for top in range(m)])
    candidates = order[:, columns]  # [prompts, m + 1, m]
    values = np.take_along_axis(rewards, candidates.reshape(prompts, -1), axis=1).reshape(candidates.shape)
    variances = np.var(values.astype(np.float32).astype(np.float64), axis=2, ddof=1).astype(np.float32)
    out = candidates[np.arange(prompts), variances.argmax(axis=1)]
    for row in np.flatnonzero(np.isnan(variances).any(axis=1)):
        out[row] = max_variance_subset(rewards[row], m)
    return out


def _variance(rewards: np.ndarray) -> np.float32:
    """The unbiased variance as the authors' torch computes it on float32 rewards (accumulated in double,
    rounded to float32): candidates whose variances differ only below float32's precision tie, and the
    first one met wins, as in their trainer."""
    return np.float32(np.var(rewards.astype(np.float32).astype(np.float64), ddof=1))


def advantages(kept_rewards: np.ndarray, epsilon: float = STD_EPSILON) -> np.ndarray:
    """GRPO's advantage over the kept responses: (r - mean) / (unbiased std + 1e-4); 0 for a single one."""
    r = np.asarray(kept_rewards, dtype=float)
    if r.size < 2:
        return np.zeros_like(r)
    return (r - r.mean()) / (r.std(ddof=1) + epsilon)
