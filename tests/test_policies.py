"""The allocation-policy interface and the literature's methods run as policies of the one StepSampler.

PODS is checked against exact enumeration of every m-subset; Knapsack RL's steps against its allocation rule
and pass-rate buffer applied by hand; both through the same synchronous driver the simulator and the CPU
trainer use."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from repro.sampling import POLICIES, SamplerSpec, StepSampler, estimator_for, greso, knapsack, pods, run_step_sync
from repro.sampling.settings import SETTINGS, KnapsackSettings


def _bernoulli(sampler: StepSampler, rates: dict, rng: np.random.Generator):
    def sample(slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
        p = np.array([rates[sampler.prompt_ids[s]] for s in slots])
        return (rng.random((slots.size, int(counts.max()))) < p[:, None]).astype(float)

    return sample


def test_every_kind_has_a_policy_and_settings_and_a_spec_checks_through_them() -> None:
    assert set(POLICIES) == set(SETTINGS) == {"uniform", "dapo", "seq", "est", "pods", "knapsack", "greso"}
    with pytest.raises(ValueError, match="m <= n"):
        SamplerSpec(kind="pods", n=4, pods_generate=3)
    with pytest.raises(ValueError, match="max_n=1 must be >= min_n=2"):
        SamplerSpec(kind="knapsack", n=8, knapsack_max_n=1)
    # the families' settings read their own prefixed fields and nothing else
    spec = SamplerSpec(kind="knapsack", n=8, knapsack_min_n=3, n_min=5)
    assert KnapsackSettings.of(spec).min_n == 3
    assert KnapsackSettings.spec_fields()["min_n"] == "knapsack_min_n"


def test_a_spec_of_the_paper_methods_stores_as_before_and_a_bench_spec_round_trips() -> None:
    # runs made before the bench families existed store no bench field, so their configs and override lists
    # are unchanged and they resume
    for kind in ("uniform", "dapo", "seq", "est"):
        stored = SamplerSpec(kind=kind).to_dict()
        assert not any(k.startswith(("pods_", "knapsack_", "greso_")) for k in stored)
        assert SamplerSpec.from_dict(stored) == SamplerSpec(kind=kind)
    bench = SamplerSpec(kind="pods", n=4, pods_generate=12)
    assert bench.to_dict()["pods_generate"] == 12
    assert SamplerSpec.from_dict(bench.to_dict()) == bench


def test_pods_keeps_the_max_variance_subset_of_every_prompt_and_scores_it_alone() -> None:
    spec = SamplerSpec(kind="pods", n=4, pods_generate=8, seed=3, epsilon=pods.STD_EPSILON)
    rng = np.random.default_rng(0)
    rates = {i: r for i, r in enumerate([0.1, 0.5, 0.9, 0.0, 1.0, 0.3])}
    sampler = StepSampler(spec, list(rates), step=0)
    result = run_step_sync(sampler, _bernoulli(sampler, rates, rng))
    assert result.pool_size.tolist() == [8] * 6
    assert result.included.all() and result.reward.size == 6 * 4
    for slot in range(6):
        pool = sampler.rewards[slot, :8]
        index, advantage = result.group(slot)
        assert index.size == 4 and len(set(index.tolist())) == 4
        # exact enumeration: no 4-subset of the 8 has a larger (unbiased) variance
        best = max(np.var(pool[list(c)], ddof=1) for c in itertools.combinations(range(8), 4))
        assert np.var(pool[index], ddof=1) == pytest.approx(best, abs=1e-12)
        kept = pool[index]
        expected = (kept - kept.mean()) / (kept.std(ddof=1) + pods.STD_EPSILON)
        np.testing.assert_allclose(advantage, expected, rtol=0, atol=1e-12)
    # a mixed pool of 8 always yields a mixed 4: the signal PODS buys with its 8 draws
    mixed_pool = (result.pool_positives > 0) & (result.pool_positives < 8)
    assert result.metrics["sampler/signal_frac"] == pytest.approx(mixed_pool.mean())


def test_knapsack_steps_allocate_from_the_buffer_and_the_buffer_learns_each_step(tmp_path) -> None:
    spec = SamplerSpec(kind="knapsack", n=4, knapsack_min_buffer_length=4, knapsack_max_n=16, seed=1)
    settings = KnapsackSettings.of(spec)
    memory = estimator_for(spec)
    assert isinstance(memory, knapsack.PassRateBuffer)
    rng = np.random.default_rng(5)
    rates = {i: r for i, r in enumerate([0.0, 0.05, 0.3, 0.5, 0.8, 1.0, 0.6, 0.2])}
    prompts = list(rates)
    by_hand = knapsack.PassRateBuffer(settings)
    for step in range(4):
        expected = knapsack.allocate(by_hand.states([str(p) for p in prompts]), settings).budget
        sampler = StepSampler(spec, prompts, step=step, estimator=memory)
        result = run_step_sync(sampler, _bernoulli(sampler, rates, rng))
        assert result.pool_size.tolist() == expected.tolist()
        assert result.pool_size.sum() == spec.n * len(prompts)  # the step's budget, exactly
        if step == 0:
            assert expected.tolist() == [4] * 8  # every prompt unseen: n each
        for slot, prompt in enumerate(prompts):
            by_hand.update(str(prompt), (sampler.rewards[slot, : result.pool_size[slot]] > 0.7).tolist())
        assert memory.to_dict() == by_hand.to_dict()
        # every response is in the update, against its own group's mean and std
        assert result.reward.size == result.pool_size.sum()
    # the buffer outlives a restart: saved and loaded, the next step allocates the same
    memory.save(tmp_path / "buffer.json")
    loaded = POLICIES["knapsack"](spec).load_memory(tmp_path / "buffer.json")
    assert loaded.states([str(p) for p in prompts]).tolist() == memory.states([str(p) for p in prompts]).tolist()
    # by now the all-solved and never-solved prompts are known and get their floors
    assert result.pool_size[0] == settings.negative_n and result.pool_size[5] == settings.positive_n


def test_a_prompt_allocated_no_response_is_finished_without_a_group() -> None:
    # no fallback: the cost check would hand the p = 0 prompt the budget the effective one does not need
    spec = SamplerSpec(
        kind="knapsack", n=4, knapsack_negative_n=0, knapsack_min_buffer_length=1, knapsack_allow_fallback=False
    )
    memory = estimator_for(spec)
    memory.update("0", [0, 0, 0])  # known never solved: 0 responses now
    memory.update("1", [1, 0, 1])
    sampler = StepSampler(spec, ["0", "1"], step=0, estimator=memory)
    slots, counts = sampler.plan()
    assert slots.tolist() == [1] and counts.tolist() == [8]  # the whole budget goes to the effective one
    sampler.observe_many(slots, np.ones((1, 8)))
    assert sampler.done()
    result = sampler.finalize()
    assert result.pool_size.tolist() == [0, 8] and result.included.tolist() == [True, True]
    assert result.group(0)[0].size == 0


def test_greso_fills_rounds_with_unskipped_prompts_and_sizes_refills_as_its_authors() -> None:
    spec = SamplerSpec(
        kind="greso",
        n=4,
        greso_sampling_batch_ratio=0.75,
        greso_min_sampling_batch_ratio=0.25,
        greso_max_rounds=5,
        seed=2,
    )
    memory = estimator_for(spec)
    rng = np.random.default_rng(11)
    rates = {i: (0.0 if i % 3 == 0 else 1.0 if i % 3 == 1 else 0.5) for i in range(200)}  # a third mixed at best
    fresh = iter(range(8, 200))
    asked: list[int] = []

    def draw(k: int) -> list[int]:
        asked.append(k)
        return [next(fresh) for _ in range(k)]

    sampler = StepSampler(spec, list(range(8)), step=0, estimator=memory)
    result = run_step_sync(sampler, _bernoulli(sampler, rates, rng), draw)
    # nothing has a history, so nothing is skipped: every drawn prompt is rolled out, 4 responses each
    assert sampler.policy.log == [greso.KEPT] * result.pool_size.size
    assert set(result.pool_size.tolist()) == {4}
    mixed = (result.pool_positives > 0) & (result.pool_positives < 4)
    # round 1 is the driver's 8 (more than the 6 asked for); the first refill is the authors' rule applied to it
    m1 = int(mixed[:8].sum())
    settings = greso.GresoSettings.of(spec)
    if m1 < 8:
        assert asked[0] == greso.refill((8 - m1) * 4, 1 - m1 / 8, settings, 8)[0]
    assert all(2 <= k <= 6 for k in asked) and len(asked) == sampler.policy.rounds - 1
    # it stops once 8 groups are mixed, after its last round, or at the cap; the update holds the first 8 mixed
    assert mixed.sum() >= 8 or sampler.policy.last or sampler.policy.rounds == 5
    assert result.included.tolist() == (mixed & (np.cumsum(mixed) <= 8)).tolist()
    assert result.metrics["greso/rounds"] == sampler.policy.rounds
    # every rolled-out prompt's group mean joined its history; the first epoch does not move the factors
    assert len(memory.histories) == result.pool_size.size
    assert (memory.p_easy, memory.p_hard) == (0.5, 0.5)


def test_greso_skips_a_known_prompt_with_the_authors_probability_drawn_from_the_step_stream(tmp_path) -> None:
    spec = SamplerSpec(kind="greso", n=2, greso_sampling_batch_ratio=0.5, seed=4)
    memory = estimator_for(spec)
    memory.histories = {"a": [1.0, 1.0, 1.0], "b": [0.0, 0.0], "c": [0.5]}
    memory.p_easy, memory.p_hard = 0.6, 0.7
    memory.save(tmp_path / "greso.json")
    memory = POLICIES["greso"](spec).load_memory(tmp_path / "greso.json")
    sampler = StepSampler(spec, ["a", "b", "c"], step=3, estimator=memory)
    # the same draws from the step's stream, through the authors' rule
    stream = np.random.default_rng([4, 3])
    expected = greso.skip([[1.0] * 3, [0.0] * 2, [0.5]], 0.6, 0.7, lambda: float(stream.random()))
    assert sampler.policy.log == expected
    # and with those draws the skip chances are the authors': 1 - 0.6^3 (easy), 1 - 0.7^2 (hard)
    assert greso.skip_probabilities([1.0] * 3, 0.6, 0.7)[0] == pytest.approx(1 - 0.6**3)
    assert greso.skip_probabilities([0.0] * 2, 0.6, 0.7)[1] == pytest.approx(1 - 0.7**2)
