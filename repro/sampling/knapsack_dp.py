"""The exact-fill knapsack of `repro.sampling.knapsack`, fast and bit for bit the same.

The authors' dynamic programme (EU:257-414) visits every (item, budget) cell and every count k at each: at
the simulator's scale (about 250 effective prompts, a budget near 2,500, k up to 126) that is 80 million
additions per step, most of them for budgets no optimal fill passes through. Here the same cells are
computed with the same float additions, max and first-argmax tie-breaking, but only where they can matter:

- `floor`: the float sum (in item order, as the programme adds) of one feasible fill, the greedy one. The
  programme's final value is at least this, because rounding is monotone: each of its cells is a max over
  fills that includes this fill's prefix.
- a cell (item i, budget w) holding value x can end, after the items left, at no more than
  x + lam * (target - w) + sum over the items left of max_k (gain[k] - lam * k), for any lam (Lagrange: the
  items left must take exactly target - w). `slack` covers the rounding of every such sum, many orders
  above it.

A cell whose bound is below `floor` is dropped (set to -inf). Nothing that decides the answer is dropped:
a cell from which some completion reaches `floor` keeps its bound above it, the cell its value came from
(and any cell tied with that one) has the same completion, so by induction those cells hold the values the
full programme gives them, and the backtrack from the target only visits such cells. A test checks this
against the full programme on random and tie-heavy cases.
"""

from __future__ import annotations

import math

import numpy as np

_SLACK = 1e-9  # relative; float rounding of the sums bounded here is below 1e-12 for any realistic size


def _greedy_counts(gain: np.ndarray, target: int) -> tuple[np.ndarray, float]:
    """A feasible fill (counts summing to `target`, each within [0, top]) and its multiplier: the `target`
    largest marginal gains, each row's marginals made non-increasing so that a row's picks form a prefix."""
    items, width = gain.shape
    if target == 0:
        return np.zeros(items, dtype=np.int64), 0.0
    marginal = np.minimum.accumulate(np.diff(gain, axis=1), axis=1).ravel()
    if target >= marginal.size:
        return np.full(items, width - 1, dtype=np.int64), float(marginal.min())
    order = np.argpartition(-marginal, target - 1)[:target]
    counts = np.bincount(order // (width - 1), minlength=items).astype(np.int64)
    return counts, float(marginal[order].min())


def exact_fill(gain: np.ndarray, budget: int) -> tuple[np.ndarray, int]:
    """Counts k per item (rows of `gain`, [items, top + 1], gain[:, 0] == 0) that the full exact-fill
    programme picks, and the budget it fills (the largest reachable, min(budget, items x top))."""
    items, width = gain.shape
    top = width - 1
    target = min(budget, items * top)
    counts, lam = _greedy_counts(gain, target)
    floor = 0.0
    for i in range(items):  # the programme's own additions, in its order
        floor = floor + float(gain[i, counts[i]])
    net = gain - lam * np.arange(width)  # gain[k] - lam k: what k is worth at the multiplier
    best_net = net.max(axis=1)
    rest = np.append(np.cumsum(best_net[::-1])[::-1], 0.0).tolist()  # rest[i]: items i.., best nets summed
    slack = _SLACK * (1.0 + float(np.abs(gain).max(axis=1).sum()) + abs(lam) * (target + items * top))
    slack += _SLACK * float(np.abs(best_net).sum())
    best_nets = best_net.tolist()

    lo, values = 0, [0.0]  # the cells kept for the items so far: budgets lo .. lo + len - 1 (-inf: dropped)
    headroom = lam * target + rest[0] - floor  # the largest bound among them, over the floor
    picks: list[tuple[int, list[int]]] = []
    for i in range(items):
        # a kept cell's value comes from a k whose net is within the headroom of the item's best net
        near = (net[i] >= best_nets[i] - headroom - 3 * slack).nonzero()[0]
        k_lo, k_hi = int(near[0]), int(near[-1])
        first = max(lo + k_lo, target - (items - 1 - i) * top)  # below it the items left cannot fill the target
        last = min(lo + len(values) - 1 + k_hi, target)
        cells = _cells if (last - first + 1) * (k_hi - k_lo + 1) <= _PYTHON_CELLS else _cells_numpy
        best, pick = cells(values, lo, gain[i, k_lo : k_hi + 1].tolist(), k_lo, first, last)
        bound_at = lam * (target - first) + rest[i + 1] + slack - floor  # bound - floor at `first`, less best
        margin = [b + (bound_at - lam * j) for j, b in enumerate(best)]  # >= 0: the cell is kept
        kept = [j for j, m in enumerate(margin) if m >= 0.0]
        if not kept:
            raise RuntimeError("knapsack: every cell pruned; the bound is wrong")
        a, b = kept[0], kept[-1] + 1
        values = [best[j] if margin[j] >= 0.0 else -math.inf for j in range(a, b)]
        headroom = max(margin[j] for j in kept) - slack
        lo = first + a
        picks.append((lo, pick[a:b]))
    if not (lo <= target < lo + len(values)) or not math.isfinite(values[target - lo]):
        raise RuntimeError("knapsack: the target was pruned; the bound is wrong")
    out = np.zeros(items, dtype=np.int64)
    w = target
    for i in range(items - 1, -1, -1):
        start, pick = picks[i]
        out[i] = pick[w - start]
        w -= out[i]
    return out, target


_PYTHON_CELLS = 256  # cells x counts up to which plain floats beat numpy's per-call cost


def _cells(
    values: list[float], lo: int, gain: list[float], k_lo: int, first: int, last: int
) -> tuple[list[float], list[int]]:
    """For budgets first..last: max over k = k_lo + c of values[w - k - lo] + gain[c] (the programme's
    addition), and the first k reaching it (argmax's rule: k_lo when every option is -inf)."""
    size = len(values)
    best_out, pick_out = [], []
    for w in range(first, last + 1):
        best, pick = -math.inf, k_lo
        for c, g in enumerate(gain):
            j = w - k_lo - c - lo
            if 0 <= j < size:
                value = values[j] + g
                if value > best:
                    best, pick = value, k_lo + c
        best_out.append(best)
        pick_out.append(pick)
    return best_out, pick_out


def _cells_numpy(
    values: list[float], lo: int, gain: list[float], k_lo: int, first: int, last: int
) -> tuple[list[float], list[int]]:
    """`_cells` as one [budgets, counts] array: the same additions, argmax the same first maximum."""
    span = len(gain) - 1
    padded = np.concatenate((np.full(span, -np.inf), np.asarray(values), np.full(span, -np.inf)))
    w = np.arange(first, last + 1)
    sums = padded[(w - lo - k_lo + span)[:, None] - np.arange(span + 1)] + np.asarray(gain)
    column = sums.argmax(axis=1)
    return sums[np.arange(w.size), column].tolist(), (column + k_lo).tolist()
