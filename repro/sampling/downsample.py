"""Downsampling a variable pool to a static update group of exactly n responses."""

from __future__ import annotations

import numpy as np


def _rank_within(mask: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Rank of each cell among the True cells of its row, ordered by key (others rank >= row count)."""
    keyed = np.where(mask, keys, np.inf)
    order = np.argsort(keyed, axis=1, kind="stable")
    ranks = np.empty_like(order)
    rows = np.arange(mask.shape[0])[:, None]
    ranks[rows, order] = np.arange(mask.shape[1])[None, :]
    return ranks


def select_group(
    positive: np.ndarray,
    valid: np.ndarray,
    n: int,
    rule: str,
    rng: np.random.Generator,
) -> np.ndarray:
    """Boolean mask [prompts, cap] of the kept responses.

    Keep min(n/2, #pos) positives and fill the rest with negatives, topping up with positives when
    negatives run short, so a pool holding both classes always yields a mixed group. Within a class
    the choice is uniform at random (`rule="random"`, the project default) or the earliest generated
    (`rule="first"`, what the released code does, which favours short responses). A pool smaller than
    n is kept whole.
    """
    positive = positive & valid
    negative = valid & ~positive
    n_pos = positive.sum(axis=1)
    n_neg = negative.sum(axis=1)
    k_pos = np.minimum(n // 2, n_pos)
    k_neg = np.minimum(n - k_pos, n_neg)
    k_pos = np.minimum(n - k_neg, n_pos)
    if rule == "random":
        keys = rng.random(positive.shape)
    elif rule == "first":
        keys = np.broadcast_to(np.arange(positive.shape[1], dtype=float), positive.shape)
    else:
        raise ValueError(f"unknown downsample rule {rule!r}")
    keep_pos = positive & (_rank_within(positive, keys) < k_pos[:, None])
    keep_neg = negative & (_rank_within(negative, keys) < k_neg[:, None])
    return keep_pos | keep_neg
