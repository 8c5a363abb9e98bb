"""PODS's batched selection and advantages against the row-by-row rule they replaced: the same indices and
the same bits, on binary, graded and tied rewards."""

from __future__ import annotations

import numpy as np
import pytest

from repro.sampling import SamplerSpec, StepSampler, pods


@pytest.mark.parametrize("kind", ["binary", "graded", "float"])
def test_batched_subsets_are_the_row_by_row_ones(kind: str) -> None:
    rng = np.random.default_rng(["binary", "graded", "float"].index(kind))
    for size, m in ((16, 4), (8, 8), (12, 5), (3, 1), (20, 9)):
        if kind == "binary":
            rewards = (rng.random((300, size)) < rng.random((300, 1))).astype(float)
        elif kind == "graded":  # few distinct values: ties between candidates' variances
            rewards = rng.integers(0, 4, size=(300, size)) / 3
        else:  # variances that differ only in the last float32 bits, and far apart
            rewards = rng.standard_normal((300, size)) * 10.0 ** rng.integers(-6, 6, size=(300, 1))
        batched = pods.max_variance_subsets(rewards, m)
        for row in range(len(rewards)):
            assert batched[row].tolist() == pods.max_variance_subset(rewards[row], m).tolist()


def test_a_row_with_nan_goes_row_by_row() -> None:
    rewards = np.array([[1.0, np.nan, 0.0, 1.0, 0.0, 0.5], [1.0, 0.0, 0.0, 1.0, 0.0, 0.5]])
    batched = pods.max_variance_subsets(rewards, 3)
    for row in range(2):
        assert batched[row].tolist() == pods.max_variance_subset(rewards[row], 3).tolist()


def test_the_policy_scores_each_kept_group_with_its_own_mean_and_std_bit_for_bit() -> None:
    spec = SamplerSpec(kind="pods", n=4, pods_generate=16, seed=3)
    rng = np.random.default_rng(5)
    sampler = StepSampler(spec, list(range(64)), step=0)
    slots, counts = sampler.plan()
    rewards = rng.integers(0, 3, size=(slots.size, int(counts.max()))) / 2
    sampler.observe_many(slots, rewards)
    result = sampler.finalize()
    for k in np.unique(result.slot):
        kept = result.reward[result.slot == k]
        assert result.baseline[k] == kept.mean()
        assert result.scale[k] == 1.0 / (kept.std(ddof=1) + sampler.policy.settings.epsilon)
    assert result.slot.size == 4 * 64


def test_greso_row_means_are_numpy_means_of_each_pool() -> None:
    from repro.sampling.policies import _row_means

    rng = np.random.default_rng(9)
    rewards = rng.standard_normal((40, 20)) * 10.0 ** rng.integers(-5, 5, size=(40, 1))
    count = rng.integers(1, 21, size=40)
    slots = rng.permutation(40)[:30].tolist()
    for slot, mean in zip(slots, _row_means(rewards, count, slots), strict=True):
        assert mean == float(np.mean(rewards[slot, : count[slot]].tolist()))
    count[slots[0]] = 0  # an empty pool: nan, as np.mean gives it
    with pytest.warns(RuntimeWarning):
        assert np.isnan(_row_means(rewards, count, slots)[0])


def test_greso_pool_shares_are_the_group_shares() -> None:
    from repro.sampling import greso

    rng = np.random.default_rng(4)
    for _ in range(50):
        sizes = rng.integers(0, 9, size=int(rng.integers(1, 30)))
        rewards = rng.choice([0.0, 0.1, 1.0], size=(sizes.size, 12), p=[0.2, 0.3, 0.5])
        rewards[rng.random(sizes.size) < 0.3] = 1.0  # whole groups solved
        rewards[rng.random(sizes.size) < 0.2] = 0.1  # whole groups format-only
        groups = [rewards[i, :n].tolist() for i, n in enumerate(sizes)]
        assert greso.pool_shares(rewards, sizes) == greso.group_shares(groups)
    assert greso.pool_shares(np.zeros((0, 4)), np.zeros(0, dtype=np.int64)) == greso.group_shares([])
