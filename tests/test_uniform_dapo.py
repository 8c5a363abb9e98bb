"""GRPO-n and DAPO through the core: verl's advantage, Beta moments, DAPO's filtering and refills."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from repro.sampling import DapoCapExceeded, SamplerSpec, StepSampler, run_step_sync
from repro.simulate.pass_rates import beta_moment


def test_grpo_advantage_equals_verls_estimator() -> None:
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rng = np.random.default_rng(0)
    spec = SamplerSpec(kind="uniform", n=8)
    prompts = 40
    rewards = rng.choice([0.0, 1.0, 0.5], size=(prompts, 8), p=[0.5, 0.4, 0.1])
    sampler = StepSampler(spec, list(range(prompts)))
    result = run_step_sync(sampler, lambda s, c: rewards[s])
    length = 5
    token_rewards = torch.zeros(result.reward.size, length)
    token_rewards[:, -1] = torch.tensor(result.reward, dtype=torch.float32)
    mask = torch.ones_like(token_rewards)
    adv, _ = compute_grpo_outcome_advantage(token_rewards, mask, result.slot, norm_adv_by_std_in_grpo=True)
    np.testing.assert_allclose(adv[:, 0].numpy(), result.advantage, rtol=1e-5, atol=1e-5)
    # and the zero-variance groups carry no signal
    zero = np.array([np.all(r == r[0]) for r in rewards])
    assert result.metrics["sampler/zero_variance_frac"] == pytest.approx(zero.mean())


def test_beta_moment_equals_numerical_integral() -> None:
    a, b = 0.262, 0.727
    for n in (1, 4, 16, 256):
        numeric, _ = integrate.quad(lambda p, n=n: p**n * stats.beta.pdf(p, a, b), 0, 1, limit=200)
        assert beta_moment(a, b, n) == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("n", [4, 16])
def test_all_correct_share_through_the_core_is_the_beta_moment(n: int) -> None:
    a, b = 0.6, 0.9
    rng = np.random.default_rng(n)
    prompts = 40000
    p = rng.beta(a, b, size=prompts)
    sampler = StepSampler(SamplerSpec(kind="uniform", n=n), list(range(prompts)))
    result = run_step_sync(sampler, lambda s, c: (rng.random((s.size, c.max())) < p[s][:, None]) * 1.0)
    all_correct = np.mean(result.pool_positives == n)
    all_wrong = np.mean(result.pool_positives == 0)
    exact_c, exact_w = beta_moment(a, b, n), beta_moment(b, a, n)
    assert all_correct == pytest.approx(exact_c, abs=4.5 * np.sqrt(exact_c * (1 - exact_c) / prompts))
    assert all_wrong == pytest.approx(exact_w, abs=4.5 * np.sqrt(exact_w * (1 - exact_w) / prompts))
    assert result.metrics["sampler/zero_variance_frac"] == pytest.approx(all_correct + all_wrong)


def dapo_sampler_with_scripted_batches(spec: SamplerSpec, batches: list[list[list[float]]], target: int):
    """Generation batch g returns batches[g]; prompt ids are (batch, position)."""
    sampler = StepSampler(spec, [(0, i) for i in range(target)])
    state = {"batch": 0}

    def sample(slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
        ids = sampler.prompt_ids
        return np.array([batches[ids[s][0]][ids[s][1]] for s in slots], dtype=float)

    def draw(k: int):
        state["batch"] += 1
        return [(state["batch"], i) for i in range(k)]

    return sampler, sample, draw


def test_dapo_keeps_only_mixed_groups_and_counts_refills() -> None:
    spec = SamplerSpec(kind="dapo", n=4, max_num_gen_batches=10)
    mixed, ones, zeros = [1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]
    batches = [
        [mixed, ones, zeros, zeros],  # 1 mixed
        [zeros, mixed, mixed, ones],  # 2 more -> 3
        [mixed, mixed, zeros, mixed],  # 3 more -> 6, 2 surplus
    ]
    sampler, sample, draw = dapo_sampler_with_scripted_batches(spec, batches, target=4)
    result = run_step_sync(sampler, sample, draw)
    m = result.metrics
    assert m["dapo/num_gen_batches"] == 3
    assert m["dapo/prompts_drawn"] == 12
    assert m["sampler/responses_total"] == 48
    assert m["sampler/additional_samples"] == 32
    assert m["dapo/kept_prompts"] == 4 and m["sampler/update_prompts"] == 4
    assert m["dapo/dropped_all_correct"] == 2 and m["dapo/dropped_all_wrong"] == 4
    assert m["dapo/discarded_surplus"] == 2
    assert m["dapo/cap_hit"] == 0
    assert m["sampler/zero_variance_frac"] == 0 and m["sampler/signal_frac"] == 1
    kept_ids = [result.prompt_ids[s] for s in np.flatnonzero(result.included)]
    assert kept_ids == [(0, 0), (1, 1), (1, 2), (2, 0)]  # first mixed groups in arrival order
    assert result.reward.size == 16


def test_dapo_cap_short_or_error() -> None:
    zeros = [0, 0, 0, 0]
    batches = [[zeros, [1, 0, 0, 0]], [zeros, zeros], [zeros, zeros]]
    spec = SamplerSpec(kind="dapo", n=4, max_num_gen_batches=2)
    sampler, sample, draw = dapo_sampler_with_scripted_batches(spec, batches, target=2)
    result = run_step_sync(sampler, sample, draw)
    assert result.metrics["dapo/num_gen_batches"] == 2
    assert result.metrics["dapo/cap_hit"] == 1
    assert result.included.sum() == 1
    sampler, sample, draw = dapo_sampler_with_scripted_batches(spec.with_(on_cap="error"), batches, target=2)
    with pytest.raises(DapoCapExceeded, match="max_num_gen_batches=2"):
        run_step_sync(sampler, sample, draw)


def test_dapo_expected_cost_matches_closed_form() -> None:
    from repro.simulate.exact import dapo_expected_batches, uniform_mixed

    rng = np.random.default_rng(5)
    pool = rng.beta(0.3, 1.2, size=5000)
    q = float(uniform_mixed(pool, 4).mean())
    spec = SamplerSpec(kind="dapo", n=4, max_num_gen_batches=0)
    counts = []
    for step in range(300):
        sampler = StepSampler(spec, rng.integers(0, 5000, size=64).tolist(), rng=step)
        result = run_step_sync(
            sampler,
            lambda s, c, sm=sampler: (rng.random((s.size, 4)) < pool[np.asarray(sm.prompt_ids)[s]][:, None]) * 1.0,
            lambda k: rng.integers(0, 5000, size=k).tolist(),
        )
        counts.append(result.metrics["dapo/num_gen_batches"])
    expected = dapo_expected_batches(q, 64, 64, 0)
    assert np.mean(counts) == pytest.approx(expected, abs=4.5 * np.std(counts) / np.sqrt(300) + 0.02)
