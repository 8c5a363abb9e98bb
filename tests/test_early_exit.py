"""The order-preserving exit keeps what a one-at-a-time sampler keeps, length included; the first-returned exit
does not (issue 46). Exact enumeration with rational probabilities: every sequence of responses (reward,
length) a prompt can draw over the cap, i.i.d. with a joint law in which short responses are more often
correct; rounds of M requested at once, returning in order of length (ties by request order); the distribution
of the kept responses (their rewards and lengths, in request order) under each rule, against the sequential
sampler's. Not against the code itself: the sequential reference is written out here."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from repro.sampling.early_exit import first_returned, order_preserving_exit, shortest_meeting_prefix
from repro.sampling.settings import SeqSettings
from repro.sampling.spec import SamplerSpec
from repro.sampling.step import StepSampler

# a response: (reward, length); short (1) responses are correct more often than long (2) ones
LAW = {(1, 1): Fraction(3, 10), (1, 2): Fraction(1, 10), (0, 1): Fraction(2, 10), (0, 2): Fraction(4, 10)}
ROUND, ROUNDS = 2, 3  # M responses requested at once, N rounds: a cap of 6 responses


def _spec(rule: str) -> SeqSettings:
    return SeqSettings(
        n=2,
        exit_rule=rule,
        round_size=ROUND,
        max_rounds=ROUNDS,
        k_pos=1,
        streaming=False,
        downsample="random",
        unresolved="keep",
        global_std_norm=False,
    )


def _sequential(rule: str, draws: tuple) -> tuple:
    """The reference, written out: draw one response at a time, stop as soon as the pool of at least n = 2
    meets the rule."""
    pos = neg = 0
    for i, (reward, _length) in enumerate(draws):
        pos, neg = pos + reward, neg + (1 - reward)
        if i >= 1 and ((rule == "pos" and pos >= 1) or (rule == "balance" and pos >= 1 and neg >= 1)):
            return draws[: i + 1]
    return draws


def _completion_order(round_draws: tuple) -> list[int]:
    return sorted(range(len(round_draws)), key=lambda i: (round_draws[i][1], i))


def _order_preserving(rule: str, draws: tuple) -> tuple:
    spec = _spec(rule)
    for r in range(ROUNDS):
        requested = draws[: (r + 1) * ROUND]
        returned = np.zeros(len(requested), dtype=bool)
        returned[: r * ROUND] = True  # the earlier rounds have all returned
        for i in _completion_order(requested[r * ROUND :]):
            returned[r * ROUND + i] = True
            keep = order_preserving_exit(spec, np.array([d[0] for d in requested]), returned)
            if keep is not None:
                return requested[:keep]  # every response after the prefix is cancelled
    return draws


def _first_returned(rule: str, draws: tuple) -> tuple:
    spec = _spec(rule)
    by_return: list = []
    for r in range(ROUNDS):
        batch = draws[r * ROUND : (r + 1) * ROUND]
        for i in _completion_order(batch):
            by_return.append(batch[i])
            keep = first_returned(spec, np.array([d[0] for d in by_return]))
            if keep is not None:
                return tuple(by_return[:keep])
    return tuple(by_return)


def _law_of(rule: str, keep) -> dict[tuple, Fraction]:
    out: dict[tuple, Fraction] = {}
    for draws in itertools.product(LAW, repeat=ROUND * ROUNDS):
        p = Fraction(1)
        for d in draws:
            p *= LAW[d]
        kept = keep(rule, draws)
        out[kept] = out.get(kept, Fraction(0)) + p
    return out


def _mean(law: dict[tuple, Fraction], of) -> Fraction:
    return sum((p * of(kept) for kept, p in law.items()), Fraction(0))


@pytest.mark.parametrize("rule", ["pos", "balance"])
def test_the_order_preserving_exit_keeps_exactly_what_a_one_at_a_time_sampler_keeps(rule: str) -> None:
    reference = _law_of(rule, _sequential)
    assert sum(reference.values()) == 1
    assert _law_of(rule, _order_preserving) == reference  # kept rewards and lengths, jointly and in order


@pytest.mark.parametrize("rule", ["pos", "balance"])
def test_the_first_returned_exit_keeps_shorter_and_more_often_correct_responses(rule: str) -> None:
    reference, biased = _law_of(rule, _sequential), _law_of(rule, _first_returned)
    assert sum(biased.values()) == 1 and biased != reference

    def length(kept) -> Fraction:
        return Fraction(sum(d[1] for d in kept), len(kept))

    def reward(kept) -> Fraction:
        return Fraction(sum(d[0] for d in kept), len(kept))

    # the mean length of a kept response is lower, and (short and correct being correlated) its mean reward
    # higher, than the sequential sampler's: the update group is no longer a sample of the policy
    assert _mean(biased, length) < _mean(reference, length)
    assert _mean(biased, reward) > _mean(reference, reward)


def test_a_prefix_counts_only_once_all_its_responses_have_returned() -> None:
    spec = _spec("pos")
    rewards = np.array([0, 1, 1, 0])
    assert order_preserving_exit(spec, rewards, np.array([False, True, True, True])) is None  # response 0 out
    assert order_preserving_exit(spec, rewards, np.array([True, True, False, False])) == 2
    assert order_preserving_exit(spec, rewards, np.array([True, False, True, True])) is None
    assert shortest_meeting_prefix(_spec("balance"), np.array([1, 1, 0, 1])) == 3
    assert shortest_meeting_prefix(_spec("balance"), np.array([1, 1, 1])) is None


def _tokens(rule: str, draws: tuple, cancel: bool) -> int:
    """Tokens generated for one prompt: a round's M responses start together and a response of length l has
    generated l tokens when it returns; with the paper's round barrier every requested response finishes, with
    the order-preserving exit the round's in-flight responses stop at the moment the rule holds on a prefix."""
    spec, total = _spec(rule), 0
    for r in range(ROUNDS):
        requested = draws[: (r + 1) * ROUND]
        batch = requested[r * ROUND :]
        returned = np.zeros(len(requested), dtype=bool)
        returned[: r * ROUND] = True
        for i in _completion_order(batch):
            returned[r * ROUND + i] = True
            if cancel and order_preserving_exit(spec, np.array([d[0] for d in requested]), returned) is not None:
                return total + sum(min(d[1], batch[i][1]) for d in batch)  # the rest cut at this moment
        total += sum(d[1] for d in batch)
        if shortest_meeting_prefix(spec, np.array([d[0] for d in requested])) is not None:
            return total  # the paper's Seq: the rule is checked once the round has returned
    return total


@pytest.mark.parametrize("rule", ["pos", "balance"])
def test_the_order_preserving_exit_generates_fewer_tokens_than_the_round_barrier(rule: str) -> None:
    expected = {}
    for cancel in (False, True):
        total = Fraction(0)
        for draws in itertools.product(LAW, repeat=ROUND * ROUNDS):
            p = Fraction(1)
            for d in draws:
                p *= LAW[d]
            total += p * _tokens(rule, draws, cancel)
        expected[cancel] = total
    # the round barrier in closed form: a round costs 2 E[l] = 3 tokens, and round r+1 happens when the first r
    # rounds' 2r responses do not meet the rule (pos: none correct, 0.6 each; balance: all alike)
    p_pos = Fraction(4, 10)
    stuck = {
        "pos": [(1 - p_pos) ** (2 * r) for r in range(ROUNDS)],
        "balance": [Fraction(1) if r == 0 else p_pos ** (2 * r) + (1 - p_pos) ** (2 * r) for r in range(ROUNDS)],
    }[rule]
    assert expected[False] == 3 * sum(stuck)  # 4.4688 and 5.0256
    # the cut pays for what it keeps (the sequential law's kept lengths) and less than the barrier
    kept = _mean(_law_of(rule, _sequential), lambda k: Fraction(sum(d[1] for d in k)))
    assert kept < expected[True] < expected[False]


def _through_the_sampler(rule: str, mode: str, draws: tuple) -> tuple:
    """The pool `StepSampler` ends a step with, one prompt driven response by response in completion order (the
    drivers' path), under the spec's early exit."""
    spec = SamplerSpec(kind="seq", n=2, exit_rule=rule, round_size=ROUND, max_rounds=ROUNDS, early_exit=mode)
    sampler, pool, drawn = StepSampler(spec, ["x"]), [], 0
    while True:
        slots, counts = sampler.plan()
        if slots.size == 0:
            break
        batch, drawn = draws[drawn : drawn + int(counts[0])], drawn + int(counts[0])
        for i in _completion_order(batch):
            end = sampler.returned(0, i, float(batch[i][0]))
            if end is not None:
                pool += [batch[k] for k in end.kept]
                break
    assert sampler.done() and sampler.count[0] == len(pool)
    assert list(sampler.rewards[0, : len(pool)]) == [float(d[0]) for d in pool]  # the pool's rewards, its order
    return tuple(pool)


@pytest.mark.parametrize("rule", ["pos", "balance"])
def test_the_sampler_keeps_the_sequential_law_under_the_order_exit_and_the_biased_one_under_first_returned(
    rule: str,
) -> None:
    assert _law_of(rule, lambda r, d: _through_the_sampler(r, "order", d)) == _law_of(rule, _sequential)

    def sorted_law(keep) -> dict:
        out: dict = {}
        for kept, p in _law_of(rule, keep).items():
            out[tuple(sorted(kept))] = out.get(tuple(sorted(kept)), Fraction(0)) + p
        return out

    through = sorted_law(lambda r, d: _through_the_sampler(r, "first-returned", d))
    assert through == sorted_law(_first_returned) != sorted_law(_sequential)


def test_the_sampler_counts_what_it_cancels_and_drops_and_keeps_the_first_n_for_the_reward_metric() -> None:
    spec = SamplerSpec(kind="seq", n=4, exit_rule="balance", round_size=8, max_rounds=2, early_exit="order")
    sampler = StepSampler(spec, ["a", "b"])
    slots, counts = sampler.plan()
    assert slots.tolist() == [0, 1] and counts.tolist() == [8, 8]
    # prompt a: positions 0-4 return (1, 0, 1, 0 then 1 at 4) before 5-7: the prefix of 4 meets the rule at the
    # 4th return; position 4 had returned (dropped), 5-7 are cancelled
    for position, reward in [(4, 1.0), (0, 1.0), (1, 0.0), (2, 1.0)]:
        assert sampler.returned(0, position, reward) is None
    end = sampler.returned(0, 3, 0.0)
    assert end is not None and end.kept.tolist() == [0, 1, 2, 3]
    assert end.cancelled.tolist() == [5, 6, 7] and end.dropped.tolist() == [4] and end.cut
    with pytest.raises(ValueError, match="are not outstanding responses"):
        sampler.returned(0, 5, 1.0)
    # prompt b: all correct, never decided: its batch ends whole, then a second round
    for position in range(8):
        end = sampler.returned(1, position, 1.0)
    assert end is not None and end.kept.tolist() == list(range(8)) and not end.cut
    slots, counts = sampler.plan()
    assert slots.tolist() == [1] and counts.tolist() == [8]
    for position in range(8):
        end = sampler.returned(1, position, 0.0 if position < 2 else 1.0)
        if end is not None:
            break
    # the pool 8 positives then 0, 0: the rule holds at the 10th response, the second round's 2nd
    assert position == 1 and end.kept.tolist() == [0, 1] and end.cancelled.tolist() == list(range(2, 8))
    result = sampler.finalize()
    assert result.pool_size.tolist() == [4, 10]
    assert result.pool_positives.tolist() == [2, 8]
    assert result.exit_round.tolist() == [1, 2]
    assert result.metrics["exit/responses_cancelled"] == 9 and result.metrics["exit/responses_dropped"] == 1
    # the reward metric reads each prompt's first n = 4 responses, a fixed-size sample: (2/4 + 4/4) / 2
    assert result.metrics["sampler/first_draw_reward_mean"] == pytest.approx(0.75)
    assert result.metrics["sampler/additional_samples"] == 14 - 4 - 8


def test_the_early_exit_is_refused_outside_seq_and_off_by_default() -> None:
    assert SamplerSpec(kind="seq").early_exit == "off" and "early_exit" not in SamplerSpec(kind="seq").to_dict()
    with pytest.raises(ValueError, match="early_exit applies to seq only"):
        SamplerSpec(kind="uniform", early_exit="order")
    with pytest.raises(ValueError, match="early_exit must be one of off, order, first-returned"):
        SamplerSpec(kind="seq", early_exit="sometimes")


@pytest.mark.parametrize("rule", ["pos", "balance"])
def test_the_one_at_a_time_samplers_mean_draws_match_a_stopping_dynamic_program(rule: str) -> None:
    from repro.simulate.exact import sequential_mean_draws

    spec = SamplerSpec(kind="seq", exit_rule=rule, n=4, round_size=8, max_rounds=4, k_pos=1)
    p = np.array([0.02, 0.1, 0.3, 0.5, 0.8, 0.97])
    closed = sequential_mean_draws(p, spec)
    for i, q in enumerate(p):
        alive, expected = {0: 1.0}, 0.0  # positives -> probability, over the paths not stopped after m draws
        for m in range(32):
            expected += sum(alive.values())  # P(T > m)
            nxt: dict[int, float] = {}
            for k, w in alive.items():
                for k2, w2 in ((k + 1, w * q), (k, w * (1 - q))):
                    met = m + 1 >= 4 and (k2 >= 1 if rule == "pos" else k2 >= 2 and m + 1 - k2 >= 2)
                    if not met:  # stopped paths leave the sum
                        nxt[k2] = nxt.get(k2, 0.0) + w2
            alive = nxt
        assert closed[i] == pytest.approx(expected, rel=1e-10)


def test_the_sampling_simulation_keeps_the_one_at_a_time_pools_under_the_exit() -> None:
    from repro import catalog
    from repro.simulate.exact import sequential_mean_draws
    from repro.simulate.sampling import simulate_method

    rates = np.random.default_rng(0).beta(0.5, 0.5, 400)
    spec = catalog.get_method("seq-balance-exit").sampler_spec(seed=0)
    stats = simulate_method("seq-balance-exit", spec, rates, steps=20, batch=64, seed=0)
    assert stats.exact["draws_mean"] == pytest.approx(float(sequential_mean_draws(rates, spec).mean()))
    # 1,280 prompts, a pool's sd about 11 responses: 5 standard errors is 1.5
    assert stats.draws_mean == pytest.approx(stats.exact["draws_mean"], abs=1.5)
    rounds = simulate_method("seq-balance", catalog.get_method("seq-balance").sampler_spec(seed=0), rates,
                             steps=20, batch=64, seed=0)  # fmt: skip
    assert stats.draws_mean < rounds.draws_mean - 1.0  # a round keeps all 8, the exit its prefix


@pytest.mark.parametrize("mode", ["order", "first-returned"])
def test_a_round_reported_at_once_is_the_per_response_path_vectorised(mode: str) -> None:
    """`returned_all` (the simulator's rounds) against `returned` with every position at once, slot by slot."""
    spec = SamplerSpec(kind="seq", exit_rule="balance", n=4, round_size=8, max_rounds=4, early_exit=mode)
    rng = np.random.default_rng(4)
    p = rng.uniform(0.0, 1.0, 64)
    fast, slow = StepSampler(spec, list(range(64))), StepSampler(spec, list(range(64)))
    while True:
        slots, counts = fast.plan()
        slow_slots, slow_counts = slow.plan()
        assert slots.tolist() == slow_slots.tolist() and counts.tolist() == slow_counts.tolist()
        if slots.size == 0:
            break
        rewards = (rng.random((slots.size, 8)) < p[slots][:, None]).astype(float)
        fast.returned_all(slots, rewards)
        for row, slot in enumerate(slots.tolist()):
            slow.returned(slot, list(range(8)), rewards[row])
    a, b = fast.finalize(), slow.finalize()
    assert a.pool_size.tolist() == b.pool_size.tolist() and a.pool_positives.tolist() == b.pool_positives.tolist()
    assert np.array_equal(fast.rewards, slow.rewards) and a.exit_round.tolist() == b.exit_round.tolist()
    assert a.metrics == b.metrics
    assert (a.pool_size % 8 != 0).any() == (mode == "order")  # prefixes end mid-round only under the order rule
