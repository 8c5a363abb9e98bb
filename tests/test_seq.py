"""Reinforce-Ada-Seq against mathematics: negative binomial draws, enumerated exit probabilities."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.sampling import SamplerSpec, StepSampler, run_step_sync
from repro.simulate.exact import seq_exact


def binom_tail(trials: int, p: float, k: int) -> float:
    """P(Binomial(trials, p) >= k) by direct summation."""
    return sum(comb(trials, j) * p**j * (1 - p) ** (trials - j) for j in range(k, trials + 1))


def capped_negbin_pool_pmf(p: float, k_pos: int, m: int, rounds: int) -> np.ndarray:
    """Pool size of seq-pos in units of rounds: the k-th success's trial, rounded up to a round, capped.

    P(pool <= m t) = P(k-th success within m t trials) = P(Binomial(m t, p) >= k).
    """
    cdf = [binom_tail(m * t, p, k_pos) for t in range(1, rounds + 1)]
    pmf = np.diff([0.0, *cdf])
    pmf[-1] += 1.0 - cdf[-1]
    return pmf


def bernoulli_sampler(p_of_slot, rng):
    def sample(slots, counts):
        return (rng.random((slots.size, int(counts.max()))) < p_of_slot(slots)[:, None]).astype(float)

    return sample


def run_constant_p(spec: SamplerSpec, p: float, prompts: int, seed: int):
    rng = np.random.default_rng(seed)
    sampler = StepSampler(spec, list(range(prompts)), rng=seed)
    return run_step_sync(sampler, bernoulli_sampler(lambda s: np.full(s.size, p), rng))


@pytest.mark.parametrize(("p", "k_pos"), [(0.05, 1), (0.15, 1), (0.1, 2), (0.3, 3)])
def test_seq_pos_pool_follows_capped_negative_binomial(p: float, k_pos: int) -> None:
    spec = SamplerSpec(kind="seq", exit_rule="pos", k_pos=k_pos, round_size=8, max_rounds=4)
    expected = capped_negbin_pool_pmf(p, k_pos, 8, 4)
    # the forward DP of simulate/exact.py must equal the negative binomial to rounding
    dp = seq_exact(np.array([p]), spec)
    np.testing.assert_allclose(dp.pool_size_pmf[0], expected, atol=1e-12)
    prompts = 20000
    result = run_constant_p(spec, p, prompts, seed=7)
    observed = np.bincount(result.pool_size // 8, minlength=5)[1:] / prompts
    sigma = np.sqrt(expected * (1 - expected) / prompts)
    assert np.all(np.abs(observed - expected) <= 4.5 * sigma + 1e-9), (observed, expected)


def enumerate_balance_exits(p: float, n: int, m: int, rounds: int) -> np.ndarray:
    """P(first exit after round t), t = 1..rounds, and P(never), by summing over every reward sequence."""
    out = np.zeros(rounds + 1)
    for seq in itertools.product((0, 1), repeat=m * rounds):
        prob = p ** sum(seq) * (1 - p) ** (len(seq) - sum(seq))
        for t in range(1, rounds + 1):
            pos = sum(seq[: m * t])
            if pos >= n // 2 and m * t - pos >= n // 2:
                out[t - 1] += prob
                break
        else:
            out[rounds] += prob
    return out


def enumerate_balance_exits_by_counts(p: float, n: int, m: int, rounds: int) -> np.ndarray:
    """Same as above for realistic M: sum over per-round positive counts with binomial weights."""
    out = np.zeros(rounds + 1)
    pmf = [comb(m, j) * p**j * (1 - p) ** (m - j) for j in range(m + 1)]
    for counts in itertools.product(range(m + 1), repeat=rounds):
        prob = float(np.prod([pmf[c] for c in counts]))
        pos = 0
        for t, c in enumerate(counts, start=1):
            pos += c
            if pos >= n // 2 and m * t - pos >= n // 2:
                out[t - 1] += prob
                break
        else:
            out[rounds] += prob
    return out


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_seq_balance_exit_probabilities_equal_enumeration_small(p: float) -> None:
    spec = SamplerSpec(kind="seq", exit_rule="balance", n=4, round_size=4, max_rounds=3)
    brute = enumerate_balance_exits(p, 4, 4, 3)  # 2^12 sequences
    assert brute.sum() == pytest.approx(1.0, abs=1e-12)
    dp = seq_exact(np.array([p]), spec)
    np.testing.assert_allclose(dp.exit_by_round[0], brute[:3], atol=1e-12)
    np.testing.assert_allclose(dp.unresolved[0], brute[3], atol=1e-12)
    prompts = 20000
    result = run_constant_p(spec, p, prompts, seed=11)
    observed = np.bincount(result.exit_round, minlength=4)  # index 0: never exited
    observed = np.concatenate([observed[1:], observed[:1]]) / prompts
    sigma = np.sqrt(brute * (1 - brute) / prompts)
    assert np.all(np.abs(observed - brute) <= 4.5 * sigma + 1e-9), (observed, brute)


@pytest.mark.parametrize("p", [0.03, 0.25, 0.97])
def test_seq_balance_paper_settings_exit_probabilities(p: float) -> None:
    spec = SamplerSpec(kind="seq", exit_rule="balance", n=4, round_size=8, max_rounds=4)
    exact = enumerate_balance_exits_by_counts(p, 4, 8, 4)
    dp = seq_exact(np.array([p]), spec)
    np.testing.assert_allclose(dp.exit_by_round[0], exact[:4], atol=1e-12)
    np.testing.assert_allclose(dp.unresolved[0], exact[4], atol=1e-12)
    prompts = 20000
    result = run_constant_p(spec, p, prompts, seed=3)
    observed = np.bincount(result.exit_round, minlength=5)
    observed = np.concatenate([observed[1:], observed[:1]]) / prompts
    sigma = np.sqrt(exact * (1 - exact) / prompts)
    assert np.all(np.abs(observed - exact) <= 4.5 * sigma + 1e-9), (observed, exact)
    # the unresolved split: at p=0.03 prompts miss positives, at p=0.97 they miss negatives
    unresolved = result.metrics["sampler/unresolved"]
    assert unresolved == pytest.approx(exact[4] * prompts, abs=4.5 * np.sqrt(exact[4] * prompts) + 1)
    miss_pos, miss_neg = (
        result.metrics["sampler/unresolved_missing_pos"],
        result.metrics["sampler/unresolved_missing_neg"],
    )
    assert miss_pos + miss_neg == unresolved
    if p < 0.5:
        assert miss_neg == 0
    else:
        assert miss_pos == 0


def scripted(rewards_by_slot: dict[int, list[float]]):
    """Each slot returns its own fixed reward stream in order, whatever the scheduling."""
    cursor = dict.fromkeys(rewards_by_slot, 0)

    def take(slot: int, count: int) -> np.ndarray:
        start = cursor[slot]
        cursor[slot] += count
        return np.asarray(rewards_by_slot[slot][start : start + count], dtype=float)

    return take


def test_seq_balance_scripted_step_metrics_and_groups() -> None:
    spec = SamplerSpec(kind="seq", exit_rule="balance", n=4, round_size=4, max_rounds=3, seed=5)
    streams = {
        0: [1, 1, 0, 0] + [9] * 8,  # exits after round 1
        1: [0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0],  # 2 positives after round 3: exits at 3
        2: [0] * 12,  # unresolved, missing positives
        3: [1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1],  # only 1 negative in 12: unresolved, missing negatives
        4: [1, 0, 0, 0, 1, 0, 0, 0] + [9] * 4,  # exits at round 2
    }
    take = scripted(streams)
    sampler = StepSampler(spec, ["a", "b", "c", "d", "e"])
    rounds = 0
    while True:
        slots, counts = sampler.plan()
        if slots.size == 0:
            break
        rounds += 1
        for s, c in zip(slots, counts, strict=True):
            sampler.observe(int(s), take(int(s), int(c)))
    result = sampler.finalize()
    assert rounds == 3
    np.testing.assert_array_equal(result.pool_size, [4, 12, 12, 12, 8])
    np.testing.assert_array_equal(result.exit_round, [1, 3, 0, 0, 2])
    m = result.metrics
    assert m["sampler/responses_total"] == 48
    assert m["sampler/additional_samples"] == 48 - 5 * 4
    assert [m[f"sampler/active_after_round_{t}"] for t in (1, 2, 3)] == [4, 3, 2]
    assert m["sampler/resolved_within_2_rounds"] == 2
    assert (m["sampler/unresolved_missing_pos"], m["sampler/unresolved_missing_neg"]) == (1, 1)
    for slot, stream in streams.items():
        idx, adv = result.group(slot)
        assert idx.size == 4
        pool = np.asarray(stream[: result.pool_size[slot]], dtype=float)
        kept = pool[idx]
        # global baseline: the mean of the whole pool, not of the kept four
        np.testing.assert_allclose(adv, kept - pool.mean())
        if 0 < pool.sum() < pool.size:
            assert 0 < kept.sum() < 4, f"slot {slot}: a mixed pool must give a mixed group"
        assert kept.sum() == min(2, pool.sum()) + max(0, 4 - min(2, pool.sum()) - (pool.size - pool.sum()))
    # slot 3 has 11 positives and 1 negative: group is 3 positives + the one negative
    idx3, _ = result.group(3)
    assert sorted(np.asarray(streams[3])[idx3]) == [0, 1, 1, 1]
    assert m["sampler/zero_variance_frac"] == pytest.approx(1 / 5)
    # the first round of each prompt, equal weight: (2/4 + 0 + 0 + 4/4 + 1/4) / 5 = 0.35; the pool mean
    # weights the long pools: (2 + 2 + 0 + 11 + 2) / 48
    assert m["sampler/first_draw_reward_mean"] == pytest.approx(0.35)
    assert m["sampler/pool_reward_mean"] == pytest.approx(17 / 48)


@pytest.mark.parametrize("kind", ["seq-pos", "seq-balance", "uniform-n4", "dapo"])
def test_first_draw_reward_is_unbiased_for_the_mean_pass_rate_and_the_pool_mean_is_not(kind: str) -> None:
    """Prompts with pass rates 0.05 and 0.6 in equal numbers: the policy's mean pass rate is 0.325. Over 400
    steps of 64 prompts the first-draw mean must be within 4 standard errors of it for every sampler; Seq's
    pool mean, which keeps drawing on the hard prompts, must fall well below it."""
    spec = {
        "seq-pos": SamplerSpec(kind="seq", exit_rule="pos", n=4, round_size=4, max_rounds=4),
        "seq-balance": SamplerSpec(kind="seq", exit_rule="balance", n=4, round_size=4, max_rounds=4),
        "uniform-n4": SamplerSpec(kind="uniform", n=4),
        "dapo": SamplerSpec(kind="dapo", n=4, max_num_gen_batches=10),
    }[kind]
    rates = np.tile([0.05, 0.6], 32)
    rng = np.random.default_rng(3)
    first, pool = [], []
    for step in range(400):
        sampler = StepSampler(spec, list(range(rates.size)), rng=step)
        sample = bernoulli_sampler(lambda slots: rates[np.asarray(slots) % rates.size], rng)
        metrics = run_step_sync(sampler, sample, lambda k: list(range(k))).metrics
        first.append(metrics["sampler/first_draw_reward_mean"])
        pool.append(metrics["sampler/pool_reward_mean"])
    first = np.asarray(first)
    assert abs(first.mean() - 0.325) < 4 * first.std(ddof=1) / np.sqrt(first.size)
    if kind.startswith("seq"):
        assert np.mean(pool) < 0.325 - 0.03


def test_unresolved_drop_removes_groups() -> None:
    spec = SamplerSpec(kind="seq", exit_rule="pos", n=4, round_size=4, max_rounds=2, unresolved="drop")
    sampler = StepSampler(spec, [0, 1])
    result = run_step_sync(sampler, lambda slots, counts: np.where(slots[:, None] == 0, 1.0, 0.0) * np.ones((1, 4)))
    assert list(result.included) == [True, False]
    assert list(result.exit_round) == [1, 0]
    assert result.metrics["sampler/unresolved_missing_pos"] == 1
    assert set(result.slot.tolist()) == {0}


def test_streaming_and_synchronous_give_identical_pools() -> None:
    """Only scheduling differs: the same reward stream per prompt yields the same pools and groups."""
    rng = np.random.default_rng(0)
    prompts = 64
    p = rng.beta(0.4, 1.0, size=prompts)
    streams = {s: (rng.random(32) < p[s]).astype(float).tolist() for s in range(prompts)}
    spec = SamplerSpec(kind="seq", exit_rule="balance", seed=9)

    sync = StepSampler(spec, list(range(prompts)))
    take = scripted(streams)
    while (plan := sync.plan())[0].size:
        for s, c in zip(*plan, strict=True):
            sync.observe(int(s), take(int(s), int(c)))
    a = sync.finalize()

    stream = StepSampler(spec.with_(streaming=True), list(range(prompts)))
    take = scripted(streams)
    pending = [(s, stream.request(s)) for s in range(prompts)]
    order = np.random.default_rng(1)
    while pending:
        s, c = pending.pop(int(order.integers(len(pending))))
        # responses come back one at a time, in a random interleaving across prompts
        for r in take(s, c):
            stream.observe(s, [r])
        nxt = stream.request(s)
        if nxt:
            pending.append((s, nxt))
    assert stream.done()
    b = stream.finalize()
    np.testing.assert_array_equal(a.pool_size, b.pool_size)
    np.testing.assert_array_equal(a.exit_round, b.exit_round)
    np.testing.assert_array_equal(a.slot, b.slot)
    np.testing.assert_array_equal(a.index, b.index)
    np.testing.assert_allclose(a.advantage, b.advantage)


def test_same_seed_same_decisions_other_seed_differs() -> None:
    spec = SamplerSpec(kind="seq", exit_rule="pos")
    runs = [run_constant_p(spec.with_(seed=s), 0.5, 200, seed=s) for s in (1, 1, 2)]
    np.testing.assert_array_equal(runs[0].index, runs[1].index)
    np.testing.assert_array_equal(runs[0].reward, runs[1].reward)
    assert not np.array_equal(runs[0].index, runs[2].index)


def test_observe_rejects_more_rewards_than_outstanding() -> None:
    sampler = StepSampler(SamplerSpec(kind="seq"), [0])
    _, counts = sampler.plan()
    with pytest.raises(ValueError, match="outstanding"):
        sampler.observe(0, np.zeros(counts[0] + 1))
    with pytest.raises(RuntimeError, match="not done"):
        sampler.finalize()


@given(
    st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=32, max_size=32), min_size=1, max_size=12),
    st.sampled_from(["pos", "balance"]),
    st.integers(1, 3),
    st.sampled_from([4, 8]),
    st.integers(1, 4),
    st.sampled_from(["random", "first"]),
    st.integers(0, 1000),
)
@settings(max_examples=150, deadline=None)
def test_step_invariants_for_any_reward_streams(streams, rule, k_pos, m, rounds, downsample, seed) -> None:
    spec = SamplerSpec(
        kind="seq", exit_rule=rule, k_pos=k_pos, round_size=m, max_rounds=rounds, downsample=downsample, seed=seed
    )
    take = scripted(dict(enumerate(streams)))
    sampler = StepSampler(spec, list(range(len(streams))))
    while (plan := sampler.plan())[0].size:
        for s, c in zip(*plan, strict=True):
            sampler.observe(int(s), take(int(s), int(c)))
    result = sampler.finalize()
    assert result.pool_size.max() <= m * rounds
    for slot, stream in enumerate(streams):
        pool = np.asarray(stream[: result.pool_size[slot]])
        assert result.pool_mean[slot] == pytest.approx(pool.mean())
        idx, adv = result.group(slot)
        assert idx.size == 4 and len(set(idx.tolist())) == 4
        np.testing.assert_allclose(adv, pool[idx] - pool.mean())
        if 0 < pool.sum() < pool.size:
            assert 0 < pool[idx].sum() < 4
        # the pool stopped exactly when the rule was first met, or at the cap
        need_pos = k_pos if rule == "pos" else 2
        need_neg = 0 if rule == "pos" else 2
        for t in range(1, rounds + 1):
            head = np.asarray(stream[: m * t])
            if head.sum() >= need_pos and (head.size - head.sum()) >= need_neg:
                assert result.pool_size[slot] == m * t and result.exit_round[slot] == t
                break
        else:
            assert result.pool_size[slot] == m * rounds and result.exit_round[slot] == 0


def test_step_index_changes_choices_reproducibly() -> None:
    spec = SamplerSpec(kind="seq", exit_rule="pos", seed=4)
    rewards = (np.random.default_rng(0).random((300, 32)) < 0.5).astype(float)

    def kept(step: int) -> np.ndarray:
        result = run_step_sync(StepSampler(spec, list(range(300)), step=step), lambda s, c: rewards[s])
        return result.index

    np.testing.assert_array_equal(kept(3), kept(3))
    assert not np.array_equal(kept(3), kept(4))
