"""Reinforce-Ada-Est's budget split: N_x ∝ 1/sqrt(p_hat_x), clamped, integer, summing to the budget; and the
released sampler's split (1 each, the rest ∝ 1/p_hat_x, no cap)."""

from __future__ import annotations

import math

import numpy as np


def continuous_allocation(p_hat: np.ndarray, budget: float, n_min: float, n_max: float) -> np.ndarray:
    """Real-valued v_x = clip(c / sqrt(p_hat_x), n_min, n_max) with c chosen so that sum v = budget.

    The clamped sum is monotone and piecewise linear in c, so bisection finds c to machine precision;
    clamping first and rescaling the rest is what keeps the hardest prompts from taking everything.
    """
    g = 1.0 / np.sqrt(np.asarray(p_hat, dtype=float))
    count = g.size
    if not count * n_min <= budget <= count * n_max:
        raise ValueError(f"budget {budget} infeasible for {count} prompts with clamps [{n_min}, {n_max}]")
    lo, hi = n_min / g.max(), n_max / g.min()
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.clip(mid * g, n_min, n_max).sum() < budget:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return np.clip(hi * g, n_min, n_max)


def largest_remainder(values: np.ndarray, total: int, low: int, high: int) -> np.ndarray:
    """Integers within [low, high], each floor or ceil of its value, summing to `total` exactly.

    Units go to the largest fractional parts first (ties to the lower index), so the result is
    deterministic and a larger value never gets fewer units than a smaller one.
    """
    values = np.asarray(values, dtype=float)
    base = np.clip(np.floor(values + 1e-9), low, high).astype(np.int64)
    frac = values - base
    short = int(total - base.sum())
    index = np.arange(values.size)
    if short > 0:
        room = np.flatnonzero(base < high)
        order = room[np.lexsort((index[room], -frac[room]))]
        if short > order.size:
            raise ValueError("total exceeds what the clamps allow")
        base[order[:short]] += 1
    elif short < 0:
        room = np.flatnonzero(base > low)
        order = room[np.lexsort((index[room], frac[room]))]
        if -short > order.size:
            raise ValueError("total is below what the clamps allow")
        base[order[:-short]] -= 1
    return base


def allocate(p_hat: np.ndarray, budget: int, n_min: int, n_max: int) -> np.ndarray:
    """Responses per prompt for one step: sum equals `budget`, each within [n_min, n_max], and a harder
    prompt (lower p_hat) never gets fewer than an easier one.

    The last property is enforced rather than inherited: pass rates a rounding error apart (0.01 and
    0.010000000000000002) can leave near-equal continuous values on either side of the 1e-9 snap in
    `largest_remainder`, so the integers are handed out again in order of difficulty (ties by index).
    """
    p_hat = np.asarray(p_hat, dtype=float)
    units = largest_remainder(continuous_allocation(p_hat, budget, n_min, n_max), budget, n_min, n_max)
    order = np.lexsort((np.arange(p_hat.size), p_hat))  # hardest first, ties to the lower index
    out = np.empty_like(units)
    out[order] = np.sort(units)[::-1]
    return out


def residual_weights(p_hat: np.ndarray, w_max: float) -> np.ndarray:
    """w_x = (1/sqrt(p_hat_x)) / batch mean, clipped at w_max.

    Sampling ∝ 1/sqrt(p) times weighting by 1/sqrt(p) gives the log objective's 1/p; the clip keeps a
    badly underestimated prompt from dominating the update.
    """
    g = 1.0 / np.sqrt(np.asarray(p_hat, dtype=float))
    return np.minimum(g / g.mean(), w_max)


def inverse_allocation(p_hat: np.ndarray, budget: int) -> np.ndarray:
    """The released Est's split (RLHFlow/Reinforce-Ada ray_trainer_ema.py): one response per prompt, the
    other `budget - prompts` shared in proportion to 1/max(p_hat, 1e-6), floors first, then one more each
    to the largest fractional parts (ties in batch order, as Python's stable sort leaves them), no cap.

    The arithmetic is the released code's, in Python floats and in the same order (a sequential sum of the
    weights, `rest * (w / sum)`), so an allocation a hair from an integer rounds the way it did there.
    """
    weights = [1.0 / max(float(p), 1e-6) for p in np.asarray(p_hat, dtype=float)]
    count = len(weights)
    out = np.ones(count, dtype=np.int64)
    rest = max(0, int(budget) - count)
    total = 0.0
    for w in weights:
        total += w
    if rest <= 0 or total <= 0:
        return out
    shares = [rest * (w / total) for w in weights]
    floors = [math.floor(v) for v in shares]
    out += np.asarray(floors, dtype=np.int64)
    leftover = rest - sum(floors)
    order = sorted(range(count), key=lambda i: shares[i] - floors[i], reverse=True)
    for i in range(leftover):
        out[order[i % count]] += 1
    return out
