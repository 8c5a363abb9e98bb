"""Invariants of the group selection and Est's allocation, over arbitrary inputs (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.sampling.allocation import allocate, continuous_allocation, largest_remainder, residual_weights
from repro.sampling.downsample import select_group

pools = st.lists(st.lists(st.booleans(), min_size=4, max_size=32), min_size=1, max_size=20)


def as_arrays(rows: list[list[bool]], cap: int = 32) -> tuple[np.ndarray, np.ndarray]:
    positive = np.zeros((len(rows), cap), dtype=bool)
    valid = np.zeros_like(positive)
    for i, row in enumerate(rows):
        positive[i, : len(row)] = row
        valid[i, : len(row)] = True
    return positive, valid


@given(pools, st.sampled_from([2, 4]), st.sampled_from(["random", "first"]), st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_group_has_exactly_n_and_is_mixed_when_pool_is(rows, n, rule, seed) -> None:
    positive, valid = as_arrays(rows)
    kept = select_group(positive, valid, n, rule, np.random.default_rng(seed))
    assert not np.any(kept & ~valid)
    for i, row in enumerate(rows):
        n_pos, n_neg = sum(row), len(row) - sum(row)
        k = kept[i].sum()
        assert k == n
        kept_pos = (kept[i] & positive[i]).sum()
        assert kept_pos == min(n // 2, n_pos) + max(0, n - min(n // 2, n_pos) - n_neg)
        if n_pos and n_neg:
            assert 0 < kept_pos < n


def test_first_rule_takes_earliest_in_each_class() -> None:
    positive, valid = as_arrays([[False, True, False, True, True, False, False, True]])
    kept = select_group(positive, valid, 4, "first", np.random.default_rng(0))
    assert np.flatnonzero(kept[0]).tolist() == [0, 1, 2, 3]


def test_random_rule_is_uniform_within_class() -> None:
    # 6 positives, 2 kept: each positive kept with probability 1/3; negatives likewise 2 of 10
    row = [True] * 6 + [False] * 10
    positive, valid = as_arrays([row] * 6000, cap=16)
    kept = select_group(positive, valid, 4, "random", np.random.default_rng(1))
    freq = kept.mean(axis=0)
    sigma_pos, sigma_neg = np.sqrt((1 / 3) * (2 / 3) / 6000), np.sqrt(0.2 * 0.8 / 6000)
    assert np.all(np.abs(freq[:6] - 1 / 3) < 4.5 * sigma_pos)
    assert np.all(np.abs(freq[6:] - 0.2) < 4.5 * sigma_neg)


rates = st.lists(st.floats(0.01, 1.0), min_size=1, max_size=64)


@given(rates, st.integers(2, 4), st.integers(8, 12), st.integers(16, 40))
@settings(max_examples=300, deadline=None)
def test_allocation_sums_to_budget_within_clamps(p, n_min, n_avg, n_max) -> None:
    p = np.asarray(p)
    budget = n_avg * p.size
    alloc = allocate(p, budget, n_min, n_max)
    assert alloc.dtype.kind == "i"
    assert alloc.sum() == budget
    assert alloc.min() >= n_min and alloc.max() <= n_max
    v = continuous_allocation(p, budget, n_min, n_max)
    assert v.sum() == pytest.approx(budget, rel=1e-9)
    assert np.all(np.abs(alloc - v) < 1 + 1e-9)
    # harder prompts (lower p) never get fewer responses
    harder = p[:, None] < p[None, :]
    assert np.all(alloc[:, None] >= alloc[None, :], where=harder)


def test_unclamped_allocation_is_proportional_to_inverse_sqrt_p() -> None:
    p = np.array([0.04, 0.16, 0.25, 0.64])
    g = 1 / np.sqrt(p)  # 5, 2.5, 2, 1.25
    v = continuous_allocation(p, 43.0, 0.5, 100)
    np.testing.assert_allclose(v, 43.0 * g / g.sum(), rtol=1e-12)


def test_clamped_allocation_redistributes_to_the_rest() -> None:
    # p=0.0001 wants far more than n_max: it is pinned at 32 and the others share the remainder
    p = np.array([1e-4, 0.25, 0.25, 0.25])
    v = continuous_allocation(p, 40.0, 2, 32)
    np.testing.assert_allclose(v, [32, 8 / 3, 8 / 3, 8 / 3], rtol=1e-9)
    assert allocate(p, 40, 2, 32).tolist() == [32, 3, 3, 2]


def test_largest_remainder_ties_go_to_lower_index() -> None:
    assert largest_remainder(np.array([1.5, 2.5, 3.0]), 7, 0, 10).tolist() == [2, 2, 3]
    assert largest_remainder(np.array([1.2, 1.9, 2.9]), 6, 0, 10).tolist() == [1, 2, 3]


def test_infeasible_budget_is_an_error() -> None:
    with pytest.raises(ValueError, match="infeasible"):
        allocate(np.array([0.5, 0.5]), 100, 2, 32)


def test_residual_weights_mean_one_and_clip() -> None:
    p = np.array([0.25, 0.25, 1.0, 1.0])  # 1/sqrt: 2, 2, 1, 1 -> mean 1.5
    np.testing.assert_allclose(residual_weights(p, 10.0), [4 / 3, 4 / 3, 2 / 3, 2 / 3])
    np.testing.assert_allclose(residual_weights(p, 1.2), [1.2, 1.2, 2 / 3, 2 / 3])


def test_pass_rates_a_rounding_error_apart_keep_the_allocation_monotone() -> None:
    """Found by hypothesis in CI: 0.01 sat one ulp below three copies of 0.010000000000000002 and got 29
    responses to their 30."""
    p = np.array([1.0] * 24 + [0.03125, 0.010000000000000002, 0.010000000000000002, 0.010000000000000002, 0.01])
    alloc = allocate(p, 8 * p.size, 4, 30)
    assert alloc.sum() == 8 * p.size and alloc[-1] == 30 and alloc[-5:].tolist() == [17, 30, 30, 29, 30]
    harder = p[:, None] < p[None, :]
    assert np.all(alloc[:, None] >= alloc[None, :], where=harder)
