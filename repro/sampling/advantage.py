"""Advantages on flat response arrays grouped by prompt slot (numpy mirrors of what verl computes)."""

from __future__ import annotations

import numpy as np


def group_stats(groups: np.ndarray, values: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group: count, mean and unbiased std (ddof=1, as torch.std; 0 for singletons)."""
    count = np.bincount(groups, minlength=n_groups).astype(float)
    total = np.bincount(groups, weights=values, minlength=n_groups)
    mean = np.divide(total, count, out=np.zeros(n_groups), where=count > 0)
    sq = np.bincount(groups, weights=(values - mean[groups]) ** 2, minlength=n_groups)
    var = np.divide(sq, count - 1, out=np.zeros(n_groups), where=count > 1)
    return count, mean, np.sqrt(var)


def grpo_groups(groups: np.ndarray, rewards: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """verl's `grpo` statistics per group, (baseline, std): the group's mean and unbiased std, but 0 and 1 for a
    group of one (or of none), so a lone response keeps its reward. Both forms below read them: one rule."""
    count, mean, std = group_stats(groups, rewards, n_groups)
    single = count <= 1
    return np.where(single, 0.0, mean), np.where(single, 1.0, std)


def grpo_advantage(
    groups: np.ndarray, rewards: np.ndarray, n_groups: int, norm_by_std: bool, epsilon: float
) -> np.ndarray:
    """verl's `grpo` estimator: (r - group mean) / (group std + eps); a singleton group keeps r."""
    baseline, std = grpo_groups(groups, rewards, n_groups)
    centred = rewards - baseline[groups]
    return centred / (std[groups] + epsilon) if norm_by_std else centred


def grpo_affine(
    groups: np.ndarray, rewards: np.ndarray, n_groups: int, epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    """verl's `grpo` with std normalisation as per-group (baseline, scale), A = (r - baseline) * scale: the form
    the verl plugin's estimator applies, so both engines compute the same bits. A singleton keeps r/(1 + eps).
    Not bit-identical to `grpo_advantage` (a product with 1/(std + eps), not a quotient), so each keeps its form."""
    baseline, std = grpo_groups(groups, rewards, n_groups)
    return baseline, 1.0 / (std + epsilon)


def global_baseline_advantage(
    rewards: np.ndarray,
    pool_mean: np.ndarray,
    pool_std: np.ndarray | None = None,
    epsilon: float = 1e-6,
) -> np.ndarray:
    """Reinforce-Ada's A_i = r_i - mean(whole pool); optional division by the pool's std (ablation)."""
    centred = rewards - pool_mean
    return centred if pool_std is None else centred / (pool_std + epsilon)


def released_est_baseline(positives: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """The released Est's baseline per prompt: the share of positives among its responses this step, and 0
    for a prompt that drew one response (the released fork's grpo with global counts gives a group of one
    mean 0 and std 1; run_reinforce_ada.sh sets norm_adv_by_std_in_grpo=False, so A = r - baseline)."""
    drawn = np.asarray(drawn, dtype=float)
    share = np.divide(np.asarray(positives, dtype=float), drawn, out=np.zeros(drawn.size), where=drawn > 0)
    return np.where(drawn > 1, share, 0.0)
