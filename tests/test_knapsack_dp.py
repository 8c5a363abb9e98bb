"""The pruned exact-fill programme (`repro.sampling.knapsack_dp`) against the full one it replaced, which is
written out below as the authors' loop (EU:257-414): the same counts on random and tie-heavy cases, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from repro.sampling import knapsack, knapsack_dp
from repro.sampling.knapsack_dp import exact_fill


def reference(rates: np.ndarray, effective: list[int], min_n: int, extra: int, budget: int) -> np.ndarray:
    """The full programme, cell by cell: every budget, every k, the first k met wins ties."""
    out = np.zeros(len(rates), dtype=np.int64)
    if budget <= 0:
        return out
    if not effective:
        knapsack._spread(out, range(len(rates)), budget)
        return out
    items = len(effective)
    dp = np.full(budget + 1, -np.inf)
    dp[0] = 0.0
    choice = np.zeros((items + 1, budget + 1), dtype=np.int64)
    for i, idx in enumerate(effective, start=1):
        gain = knapsack.gains(rates[idx], min_n, extra)
        best = dp.copy()
        pick = np.zeros(budget + 1, dtype=np.int64)
        for k in range(1, min(extra, budget) + 1):
            value = np.full(budget + 1, -np.inf)
            value[k:] = dp[:-k] + gain[k]
            better = value > best
            best[better] = value[better]
            pick[better] = k
        dp = best
        choice[i] = pick
    reached = int(np.flatnonzero(np.isfinite(dp)).max())
    w = reached
    for i in range(items, 0, -1):
        k = int(choice[i, w])
        if k > 0:
            out[effective[i - 1]] += k
            w -= k
    if budget - reached > 0:
        knapsack._spread(out, effective, budget - reached)
    return out


def _case(rng: np.random.Generator, kind: str) -> tuple[np.ndarray, list[int], int, int, int]:
    prompts = int(rng.integers(1, 40))
    if kind == "window":  # the buffer's estimates: sixteenths, many prompts sharing one
        rates = rng.integers(1, 16, size=prompts) / 16
    elif kind == "same":  # every prompt alike: ties at every cell
        rates = np.full(prompts, rng.choice([0.5, 0.25, 1 / 16]))
    else:
        rates = rng.random(prompts)
    rates = rates.astype(np.float32)
    effective = sorted(rng.choice(prompts, size=int(rng.integers(0, prompts + 1)), replace=False).tolist())
    extra = int(rng.choice([0, 1, 3, 10, 40, 126]))
    budget = int(rng.integers(0, max(2, len(effective) * min(extra, 12) * 2)))
    return rates, effective, int(rng.integers(1, 5)), extra, budget


@pytest.mark.parametrize("cells", ["plain floats", "numpy", "either"])
@pytest.mark.parametrize("kind", ["window", "same", "uniform"])
def test_the_pruned_programme_picks_what_the_full_one_picks(kind: str, cells: str, monkeypatch) -> None:
    # each block of cells runs as plain floats or as one numpy array by its size; both paths, forced here
    limits = {"plain floats": 10**9, "numpy": 0}
    if cells in limits:
        monkeypatch.setattr(knapsack_dp, "_PYTHON_CELLS", limits[cells])
    rng = np.random.default_rng(["window", "same", "uniform"].index(kind))
    for _ in range(150):
        rates, effective, min_n, extra, budget = _case(rng, kind)
        got = knapsack.knapsack(rates, effective, min_n, extra, budget)
        assert got.tolist() == reference(rates, effective, min_n, extra, budget).tolist()


def test_saturated_gains_tie_and_the_first_k_still_wins() -> None:
    # p = 0.5 with 126 extra: the gain stops growing in float64 long before k = 126, so every cell past it
    # ties; a budget above what the gains reward keeps those ties on the answer's path
    rates = np.full(12, 0.5, dtype=np.float32)
    for budget in (5, 60, 700, 1512, 2000):
        got = knapsack.knapsack(rates, list(range(12)), 2, 126, budget)
        assert got.tolist() == reference(rates, list(range(12)), 2, 126, budget).tolist()


def test_paper_scale_allocation_matches_the_full_programme() -> None:
    # one step of the simulator's size: 250 effective prompts, a budget near 2,500
    rng = np.random.default_rng(7)
    rates = (rng.integers(1, 16, size=250) / 16).astype(np.float32)
    budget = 2500
    got = knapsack.knapsack(rates, list(range(250)), 2, 126, budget)
    assert got.sum() == budget
    assert got.tolist() == reference(rates, list(range(250)), 2, 126, budget).tolist()


def test_exact_fill_reports_the_largest_reachable_budget() -> None:
    gain = np.stack([knapsack.gains(np.float32(0.3), 2, 4)] * 3)
    counts, reached = exact_fill(gain, 100)
    assert reached == 12 and counts.tolist() == [4, 4, 4]
