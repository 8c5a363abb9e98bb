"""Reinforce-Ada-Est: the decayed Beta-Bernoulli estimator, its persistence, and the Est step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from repro.sampling import BetaBernoulliEstimator, SamplerSpec, StepSampler, make_estimator, run_step_sync
from repro.sampling.allocation import allocate, residual_weights


def test_update_rule_by_hand() -> None:
    est = BetaBernoulliEstimator(kappa=2.0, decay=0.5, p_min=0.05, prior_mean_init=0.25)
    # unseen prompt: prior mean 0.25 with strength 2 -> a=0.5, b=1.5
    assert est.p_hat(["x"]).tolist() == [0.25]
    est.update(["x"], np.array([3]), np.array([4]))
    # a = 0.5*0.5 + 3 = 3.25, b = 0.5*1.5 + 1 = 1.75
    assert est.posterior_mean(["x"])[0] == pytest.approx(3.25 / 5.0)
    # running batch rate is now 3/4; a new prompt starts from it
    assert est.prior_mean() == pytest.approx(0.75)
    assert est.p_hat(["y"])[0] == pytest.approx(0.75)
    est.update(["x", "y"], np.array([0, 0]), np.array([8, 8]))
    # x: a = 0.5*3.25 = 1.625, b = 0.5*1.75 + 8 = 8.875
    assert est.posterior_mean(["x"])[0] == pytest.approx(1.625 / 10.5)
    # y entered with prior 0.75: a = 0.5*1.5 = 0.75, b = 0.5*0.5 + 8 = 8.25
    assert est.posterior_mean(["y"])[0] == pytest.approx(0.75 / 9.0)
    # running: k = 0.5*3 + 0 = 1.5, m = 0.5*4 + 16 = 18
    assert est.prior_mean() == pytest.approx(1.5 / 18)


def test_clamped_at_p_min() -> None:
    est = BetaBernoulliEstimator(kappa=1.0, decay=0.9, p_min=0.05)
    est.update([7], np.array([0]), np.array([32]))
    assert est.posterior_mean([7])[0] < 0.05
    assert est.p_hat([7])[0] == 0.05


def test_converges_to_true_rate_without_decay() -> None:
    est = BetaBernoulliEstimator(kappa=2.0, decay=1.0, p_min=0.001)
    rng = np.random.default_rng(0)
    p = np.array([0.05, 0.3, 0.8])
    for _ in range(400):
        k = rng.binomial(8, p)
        est.update([0, 1, 2], k, np.full(3, 8))
    np.testing.assert_allclose(est.p_hat([0, 1, 2]), p, atol=0.03)


def test_save_load_roundtrip_continues_identically(tmp_path) -> None:
    spec = SamplerSpec(kind="est", n_avg=8, n_min=2, n_max=32, seed=3)
    rng_p = np.random.default_rng(4)
    p = rng_p.beta(0.5, 1.5, size=200)

    def run(est: BetaBernoulliEstimator, steps: range) -> list[np.ndarray]:
        sizes = []
        for step in steps:
            rng = np.random.default_rng(100 + step)
            ids = rng.choice(200, size=64, replace=False)
            sampler = StepSampler(spec, ids.tolist(), rng=step, estimator=est)
            res = run_step_sync(
                sampler,
                lambda s, c, ids=ids, rng=rng: (rng.random((s.size, c.max())) < p[ids[s]][:, None]) * 1.0,
            )
            sizes.append(res.pool_size)
        return sizes

    full = make_estimator(spec)
    straight = run(full, range(10))
    half = make_estimator(spec)
    run(half, range(5))
    half.save(tmp_path / "est.json")
    state = json.loads((tmp_path / "est.json").read_text())
    assert state["version"] == 1 and len(state["prompts"]["ids"]) == len(half)
    resumed = BetaBernoulliEstimator.load(tmp_path / "est.json")
    after = run(resumed, range(5, 10))
    for a, b in zip(straight[5:], after, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(resumed.p_hat(list(range(200))), full.p_hat(list(range(200))))
    # a fresh estimator (a resume that forgot the state) allocates differently
    assert not all(
        np.array_equal(a, b) for a, b in zip(straight[5:], run(make_estimator(spec), range(5, 10)), strict=True)
    )


def test_bad_state_is_rejected(tmp_path) -> None:
    est = BetaBernoulliEstimator(1.0, 0.9, 0.02)
    state = est.state_dict()
    state["version"] = 99
    with pytest.raises(ValueError, match="version"):
        est.load_state_dict(state)


def test_est_step_allocates_weights_and_advantages() -> None:
    spec = SamplerSpec(kind="est", n_avg=8, n_min=2, n_max=32, w_max=5.0, kappa=2.0, decay=0.9)
    est = make_estimator(spec)
    # teach the estimator three very different prompts
    est.update(["easy", "mid", "hard"], np.array([30, 8, 0]), np.array([32, 32, 32]))
    p_hat = est.p_hat(["easy", "mid", "hard"])
    sampler = StepSampler(spec, ["easy", "mid", "hard"], estimator=est)
    slots, counts = sampler.plan()
    np.testing.assert_array_equal(counts, allocate(p_hat, 24, 2, 32))
    assert counts.sum() == 24 and counts[2] > counts[1] > counts[0]
    rewards = {
        0: np.r_[np.ones(counts[0] - 1), 0.0],
        1: np.r_[1.0, np.zeros(counts[1] - 1)],
        2: np.zeros(counts[2]),
    }
    for s in slots:
        sampler.observe(int(s), rewards[int(s)])
    result = sampler.finalize()
    w = residual_weights(p_hat, 5.0)
    np.testing.assert_allclose(result.weight, w)
    assert result.reward.size == 24  # every drawn response is used
    for s in range(3):
        idx, adv = result.group(s)
        r = rewards[s]
        np.testing.assert_allclose(adv, (r[idx] - r.mean()) * w[s])
    assert result.metrics["est/alloc_max"] == counts.max()
    assert result.metrics["est/p_hat_min"] == pytest.approx(p_hat.min())
    # finalize taught the estimator this step. "hard" started at prior 0.5 x strength 2 (a=b=1),
    # then 0 of 32 (a=0.9, b=32.9), now 0 of counts[2]:
    a, b = 0.9 * 0.9, 0.9 * 32.9 + counts[2]
    assert est.posterior_mean(["hard"])[0] == pytest.approx(a / (a + b))


def test_est_requires_estimator() -> None:
    with pytest.raises(ValueError, match="BetaBernoulliEstimator"):
        StepSampler(SamplerSpec(kind="est"), [0, 1])
