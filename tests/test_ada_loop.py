"""The async Reinforce-Ada driver against a scripted stand-in for verl's LLM server.

Every response is "\\boxed{<answer>}", right or wrong by a per-prompt rule on the call index (0, 1, 2, ...
for that prompt), scored by the project's real math-verify reward. Pool sizes and exit rounds below are
worked out by hand from the rules (M = 8 per round, N = 4 rounds, n = 4).
"""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Callable

import numpy as np
import pytest

from repro.cpu_lm.tokenizer import build_tokenizer
from repro.reward import compute_score
from repro.sampling import SamplerSpec, StepSampler, allocate, make_estimator, residual_weights, run_step_sync
from repro.verl_plugin.ada_loop import AdaptiveStep, Generation, Sample, make_generate, run_adaptive_step

with warnings.catch_warnings():  # verl imports ray, whose state API warns on import; not ours to fix
    warnings.filterwarnings("ignore", message="Ray state API", category=DeprecationWarning)
    from repro.verl_plugin.fake_server import FakeLLMServer

Rule = Callable[[int], bool]
SEQ_BALANCE = SamplerSpec(kind="seq", exit_rule="balance")
SEQ_POS = SamplerSpec(kind="seq", exit_rule="pos")
PARAMS = {"temperature": 1.0, "top_p": 1.0}

# name: (rule on the call index, pool size under seq-balance, exit round (0 = unresolved), positives)
BALANCE_CASES: dict[str, tuple[Rule, int, int, int]] = {
    "one_in_4": (lambda c: c % 4 == 0, 8, 1, 2),  # round 1 has calls 0 and 4 right: 2 pos, 6 neg
    "one_in_16": (lambda c: c % 16 == 0, 24, 3, 2),  # call 0 (round 1), call 16 (round 3)
    "never": (lambda c: False, 32, 0, 0),  # no positive within the cap
    "always": (lambda c: True, 32, 0, 32),  # no negative within the cap
    "wrong_on_5_13": (lambda c: c not in (5, 13), 16, 2, 14),  # negatives at calls 5 (r1) and 13 (r2)
    "right_on_9_30": (lambda c: c in (9, 30), 32, 4, 2),  # positives at calls 9 (r2) and 30 (r4)
}


def right(slot: int) -> str:
    return f"\\boxed{{{10 + slot}}}"


def wrong(slot: int) -> str:
    return f"\\boxed{{{110 + slot}}}"


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module", autouse=True)
def warm_reward():
    """math-verify's first call imports sympy (~0.5 s); do it outside any timed schedule."""
    for slot in range(40):
        compute_score("test", right(slot), str(10 + slot))
        compute_score("test", wrong(slot), str(10 + slot))


class Scenario:
    """Prompts, ground truths and the fake server for a list of per-prompt rules."""

    def __init__(self, tok, rules: list[Rule], *, latency=None, params=PARAMS, max_concurrency=None) -> None:
        self.rules = rules
        self.prompts = [tok.encode(f"what is {slot}+10?", add_special_tokens=False) for slot in range(len(rules))]
        self.slot_of = {tuple(p): slot for slot, p in enumerate(self.prompts)}
        self.answers = [str(10 + slot) for slot in range(len(rules))]
        lat = None if latency is None else (lambda p, text: latency(self.slot_of[tuple(p)]))
        self.server = FakeLLMServer(tok, self.script, latency=lat)
        self.params = dict(params)
        self.generate = make_generate(
            self.server, tok, self.prompts, self.answers, "test", self.params, max_concurrency=max_concurrency
        )

    def script(self, prompt_ids: list[int], call_index: int) -> str:
        slot = self.slot_of[tuple(prompt_ids)]
        return right(slot) if self.rules[slot](call_index) else wrong(slot)

    def run(self, spec: SamplerSpec, **kwargs) -> AdaptiveStep:
        ids = [f"p{slot}" for slot in range(len(self.rules))]
        return asyncio.run(run_adaptive_step(spec, ids, self.generate, **kwargs))

    def calls(self, slot: int):
        return self.server.calls_for(self.prompts[slot])


def bernoulli_rules(count: int, seed: int = 0) -> list[Rule]:
    """Fixed pseudo-random reward streams with pass rates spread over [0, 1]."""
    rng = np.random.default_rng(seed)
    rates = np.linspace(0.0, 1.0, count)
    streams = [rng.random(64) < p for p in rates]
    return [lambda c, s=s: bool(s[c]) for s in streams]


def rewards_of(samples: list[Sample]) -> list[float]:
    return [s.reward for s in samples]


# ---- (a) seq-balance ------------------------------------------------------------------------------
def test_seq_balance_pools_exits_and_groups_match_the_hand_computed_script(tok):
    names = list(BALANCE_CASES)
    sc = Scenario(tok, [BALANCE_CASES[k][0] for k in names])
    out = sc.run(SEQ_BALANCE)
    for slot, name in enumerate(names):
        _, size, exit_round, positives = BALANCE_CASES[name]
        pool = out.pools[slot]
        assert out.pool_size[slot] == size == len(pool), name
        assert size % 8 == 0 and size <= 32
        assert out.result.exit_round[slot] == exit_round, name
        assert sum(rewards_of(pool)) == positives, name
        assert sc.server.call_counts[tuple(sc.prompts[slot])] == size
        # the pool is the script's stream in call order, scored by the real verifier
        assert [s.payload.text for s in pool] == [sc.script(sc.prompts[slot], c) for c in range(size)]
        assert rewards_of(pool) == [float(sc.rules[slot](c)) for c in range(size)]
        # global statistics over the whole pool, not the kept four
        assert out.pool_mean[slot] == pytest.approx(positives / size)
        assert out.pool_mean[slot] == pytest.approx(np.mean(rewards_of(pool)))
        assert out.pool_std[slot] == pytest.approx(np.std(rewards_of(pool), ddof=1))
        assert out.weight[slot] == 1.0
        # exactly n kept, in arrival order, and they are the pool's samples at those indices
        kept, index = out.kept[slot], out.kept_index[slot]
        assert len(kept) == 4 and index == sorted(index) and len(set(index)) == 4
        assert all(k is pool[i] for k, i in zip(kept, index, strict=True))
        mixed_pool = 0 < positives < size
        if mixed_pool:
            assert sorted(rewards_of(kept)) == [0.0, 0.0, 1.0, 1.0], name
        else:
            assert len(set(rewards_of(kept))) == 1, name
        assert out.kept_advantage[slot] == pytest.approx([s.reward - out.pool_mean[slot] for s in kept])
    m = out.metrics
    assert m["sampler/responses_total"] == 8 + 24 + 32 + 32 + 16 + 32
    assert m["sampler/unresolved"] == 2
    assert m["sampler/unresolved_missing_pos"] == 1 and m["sampler/unresolved_missing_neg"] == 1
    assert [m[f"sampler/active_after_round_{t}"] for t in (1, 2, 3, 4)] == [5, 4, 3, 2]
    assert len(out.rows()) == 24


def test_seq_balance_keeps_a_mixed_group_whenever_the_pool_is_mixed(tok):
    sc = Scenario(tok, bernoulli_rules(16, seed=3))
    out = sc.run(SEQ_BALANCE, step=5)
    for slot in range(16):
        pool, kept = rewards_of(out.pools[slot]), rewards_of(out.kept[slot])
        assert len(kept) == 4
        if 0 < sum(pool) < len(pool):
            assert 0 < sum(kept) < 4
        if out.result.exit_round[slot] == 0:
            assert len(pool) == 32


# ---- (b) seq-pos ----------------------------------------------------------------------------------
def test_seq_pos_exits_at_the_first_round_with_a_positive(tok):
    cases = {  # rule, pool size, exit round, positives kept
        "one_in_4": (lambda c: c % 4 == 0, 8, 1, 2),
        "one_in_16": (lambda c: c % 16 == 0, 8, 1, 1),
        "right_on_9_30": (lambda c: c in (9, 30), 16, 2, 1),
        "from_20": (lambda c: c >= 20, 24, 3, 2),  # round 3 holds calls 16..23: 20..23 right
        "never": (lambda c: False, 32, 0, 0),
    }
    sc = Scenario(tok, [v[0] for v in cases.values()])
    out = sc.run(SEQ_POS)
    for slot, (name, (_, size, exit_round, kept_pos)) in enumerate(cases.items()):
        assert out.pool_size[slot] == size, name
        assert out.result.exit_round[slot] == exit_round, name
        assert len(out.kept[slot]) == 4
        assert sum(rewards_of(out.kept[slot])) == kept_pos, name


# ---- (c) streaming == synchronous -----------------------------------------------------------------
def _est_spec_and_estimators(ids: list[str]):
    spec = SamplerSpec(kind="est", n_avg=8, n_min=2, n_max=32)
    pairs = []
    for _ in range(2):
        est = make_estimator(spec)
        est.update(ids, np.array([0, 1, 2, 4, 6, 7, 8, 3]), np.full(8, 8))
        pairs.append(est)
    return spec, pairs


@pytest.mark.parametrize("method", ["seq-balance", "seq-pos", "est"])
def test_streaming_and_synchronous_give_identical_pools_and_groups(tok, method):
    rules = [v[0] for v in BALANCE_CASES.values()] + bernoulli_rules(2, seed=7)
    ids = [f"p{slot}" for slot in range(len(rules))]
    estimators: list = [None, None]
    if method == "est":
        spec, estimators = _est_spec_and_estimators(ids)
    else:
        spec = SEQ_BALANCE if method == "seq-balance" else SEQ_POS
    outs, servers = [], []
    for streaming, est in zip((False, True), estimators, strict=True):
        sc = Scenario(tok, rules)
        outs.append(sc.run(spec.with_(streaming=streaming), estimator=est, step=2))
        servers.append(sc.server)
    sync, stream = outs
    assert sync.pool_size == stream.pool_size
    assert sync.kept_index == stream.kept_index
    assert sync.pool_mean == stream.pool_mean
    assert sync.weight == stream.weight
    for slot in sync.pools:
        assert rewards_of(sync.pools[slot]) == rewards_of(stream.pools[slot])
        assert [s.payload.text for s in sync.kept[slot]] == [s.payload.text for s in stream.kept[slot]]
    np.testing.assert_array_equal(sync.result.advantage, stream.result.advantage)
    np.testing.assert_array_equal(sync.result.exit_round, stream.result.exit_round)
    assert servers[0].call_counts == servers[1].call_counts
    assert sum(servers[0].call_counts.values()) == sum(sync.pool_size.values())


def test_async_driver_matches_the_cores_synchronous_driver(tok):
    """Same reward streams through `run_step_sync` (no asyncio, no server): same pools and groups."""
    rules = [v[0] for v in BALANCE_CASES.values()] + bernoulli_rules(4, seed=11)
    ids = [f"p{slot}" for slot in range(len(rules))]
    drawn = np.zeros(len(rules), dtype=int)

    def sample(slots, counts):
        out = np.zeros((len(slots), int(counts.max())))
        for row, (slot, count) in enumerate(zip(slots, counts, strict=True)):
            out[row, :count] = [float(rules[slot](c)) for c in range(drawn[slot], drawn[slot] + count)]
            drawn[slot] += count
        return out

    core = run_step_sync(StepSampler(SEQ_BALANCE, ids, step=4), sample)
    for streaming in (False, True):
        out = Scenario(tok, rules).run(SEQ_BALANCE.with_(streaming=streaming), step=4)
        np.testing.assert_array_equal(core.pool_size, list(out.pool_size.values()))
        np.testing.assert_array_equal(core.slot, out.result.slot)
        np.testing.assert_array_equal(core.index, out.result.index)
        np.testing.assert_allclose(core.advantage, out.result.advantage)


# ---- (d) scheduling: no round barrier when streaming ----------------------------------------------
def test_streaming_lets_fast_prompts_finish_while_a_slow_prompt_is_still_in_round_one(tok):
    slow = lambda c: c % 2 == 0  # noqa: E731 - 4 right, 4 wrong in round 1: exits after it
    rules = [slow, *(lambda c: False for _ in range(3))]  # fast prompts never right: 4 rounds each
    latency = lambda slot: 0.25 if slot == 0 else 0.005  # noqa: E731

    sc = Scenario(tok, rules, latency=latency)
    out = sc.run(SEQ_BALANCE.with_(streaming=True))
    assert out.pool_size == {0: 8, 1: 32, 2: 32, 3: 32}
    slow_first_end = min(c.end for c in sc.calls(0))
    for slot in (1, 2, 3):
        later = [c for c in sc.calls(slot) if c.call_index >= 8]  # rounds 2..4
        assert len(later) == 24
        assert max(c.end for c in later) < slow_first_end

    sc = Scenario(tok, rules, latency=latency)
    sync = sc.run(SEQ_BALANCE)
    assert sync.pool_size == out.pool_size
    slow_last_end = max(c.end for c in sc.calls(0))
    for slot in (1, 2, 3):
        later = [c for c in sc.calls(slot) if c.call_index >= 8]
        assert min(c.start for c in later) >= slow_last_end  # the barrier: round 2 waits for round 1


# ---- (e) est --------------------------------------------------------------------------------------
def test_est_allocates_the_budget_by_pass_rate_and_keeps_everything(tok):
    ids = [f"p{slot}" for slot in range(8)]
    spec, (est, _) = _est_spec_and_estimators(ids)
    p_hat = est.p_hat(ids)
    expected = allocate(p_hat, 8 * 8, 2, 32)
    sc = Scenario(tok, bernoulli_rules(8, seed=5))
    out = asyncio.run(run_adaptive_step(spec, ids, sc.generate, estimator=est))
    sizes = np.array([out.pool_size[s] for s in range(8)])
    np.testing.assert_array_equal(sizes, expected)
    assert sizes.sum() == 8 * 8 and sizes.min() >= 2 and sizes.max() <= 32
    assert np.all(np.diff(sizes[np.argsort(p_hat)]) <= 0)  # harder prompts never get fewer responses
    assert len(set(sizes.tolist())) > 1
    for slot in range(8):
        assert out.kept[slot] == out.pools[slot]
        assert out.kept_index[slot] == list(range(sizes[slot]))
        assert sc.server.call_counts[tuple(sc.prompts[slot])] == sizes[slot]
        assert out.kept_advantage[slot] == pytest.approx(
            [(s.reward - out.pool_mean[slot]) * out.weight[slot] for s in out.kept[slot]]
        )
    np.testing.assert_allclose([out.weight[s] for s in range(8)], residual_weights(p_hat, spec.w_max))
    assert out.metrics["est/alloc_max"] == sizes.max()


# ---- (f) max_tokens -------------------------------------------------------------------------------
def test_fake_server_truncates_at_max_tokens(tok):
    text = "\\boxed{17}"  # 10 characters, so 11 tokens with eos
    server = FakeLLMServer(tok, lambda p, c: text)

    def gen(max_tokens):
        params = {"max_tokens": max_tokens}
        out = asyncio.run(server.generate("r", prompt_ids=[5, 6], sampling_params=params))
        assert params == {"max_tokens": max_tokens}  # the caller's dict is left alone
        return out, tok.decode(out.token_ids, skip_special_tokens=True)

    out, decoded = gen(11)
    assert out.stop_reason == "completed" and out.token_ids[-1] == tok.eos_token_id and decoded == text
    out, decoded = gen(10)  # only the eos is cut: still "length", and the answer is intact
    assert out.stop_reason == "length" and len(out.token_ids) == 10 and compute_score("t", decoded, "17") == 1.0
    out, decoded = gen(8)
    assert out.stop_reason == "length" and decoded == "\\boxed{1" and compute_score("t", decoded, "17") == 0.0


def test_truncated_responses_score_zero_in_the_loop(tok):
    sc = Scenario(tok, [lambda c: True, lambda c: c % 2 == 0], params={**PARAMS, "max_tokens": 7})
    out = sc.run(SEQ_BALANCE)
    for slot in (0, 1):
        pool = out.pools[slot]
        assert len(pool) == 32  # never a positive: the closing brace is always cut
        assert all(s.reward == 0.0 and s.payload.stop_reason == "length" for s in pool)
        assert all(len(s.payload.response_ids) == 7 and "}" not in s.payload.text for s in pool)
    assert sc.params["max_tokens"] == 7


# ---- (g) the verl interface -----------------------------------------------------------------------
def test_every_call_used_the_verl_generate_signature(tok):
    sc = Scenario(tok, [v[0] for v in BALANCE_CASES.values()])
    out = sc.run(SEQ_BALANCE.with_(streaming=True))
    calls = sc.server.calls
    assert len(calls) == sum(out.pool_size.values())
    ids = [c.request_id for c in calls]
    assert all(isinstance(r, str) and len(r) == 32 for r in ids) and len(set(ids)) == len(ids)
    for c in calls:
        assert type(c.prompt_ids) is list and all(type(t) is int for t in c.prompt_ids)
        assert c.prompt_ids == sc.prompts[sc.slot_of[tuple(c.prompt_ids)]]
        assert type(c.sampling_params) is dict and c.sampling_params == PARAMS
        assert c.extra_kwargs == {}
    for samples in out.pools.values():
        for s in samples:
            assert isinstance(s.payload, Generation) and s.payload.reward == s.reward


def test_fake_server_mirrors_llm_server_client_generate(tok):
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.replica import TokenOutput

    def shape(fn):
        params = list(inspect.signature(fn).parameters.values())
        return [(p.name, p.kind, p.default) for p in params]

    assert shape(FakeLLMServer.generate) == shape(LLMServerClient.generate)
    assert inspect.iscoroutinefunction(FakeLLMServer.generate)
    server = FakeLLMServer(tok, {(1, 2): ["\\boxed{1}", "\\boxed{2}"]}, global_steps=3)
    outs = [asyncio.run(server.generate(f"r{i}", prompt_ids=[1, 2], sampling_params={})) for i in range(3)]
    assert all(isinstance(o, TokenOutput) for o in outs)
    texts = [tok.decode(o.token_ids, skip_special_tokens=True) for o in outs]
    assert texts == ["\\boxed{1}", "\\boxed{2}", "\\boxed{1}"]  # the per-prompt list, cyclically
    assert outs[0].extra_fields["global_steps"] == 3 and outs[0].log_probs is None
    logprobs = asyncio.run(server.generate("r", prompt_ids=[1, 2], sampling_params={"logprobs": True}))
    assert logprobs.log_probs is not None and len(logprobs.log_probs) == len(logprobs.token_ids)
    kw = asyncio.run(server.generate("r", prompt_ids=[1, 2], sampling_params={}, image_data=None, priority=2))
    assert kw.stop_reason == "completed" and server.calls[-1].extra_kwargs == {"priority": 2}
    with pytest.raises(TypeError):
        asyncio.run(server.generate("r", prompt_ids=np.array([1, 2]), sampling_params={}))
    assert server.call_counts[(1, 2)] == 5


# ---- concurrency and failures ---------------------------------------------------------------------
def test_concurrency_caps_and_recording(tok):
    sc = Scenario(tok, [lambda c: False] * 3, latency=lambda slot: 0.001)
    sc.run(SEQ_BALANCE)
    assert sc.server.max_in_flight == 3 * 8  # a whole synchronous round at once

    sc = Scenario(tok, [lambda c: False] * 3, latency=lambda slot: 0.001, max_concurrency=5)
    sc.run(SEQ_BALANCE.with_(streaming=True))
    assert sc.server.max_in_flight == 5

    rules = bernoulli_rules(4, seed=2)  # a cap on server requests changes the schedule, not the pools
    free = Scenario(tok, rules).run(SEQ_BALANCE)
    sc = Scenario(tok, rules, latency=lambda slot: 0.0005 * (slot + 1), max_concurrency=3)
    capped = sc.run(SEQ_BALANCE.with_(streaming=True))
    assert sc.server.max_in_flight == 3
    assert capped.kept_index == free.kept_index
    assert all(rewards_of(capped.pools[s]) == rewards_of(free.pools[s]) for s in free.pools)

    in_flight, peak = 0, 0

    async def counting(slot: int, count: int) -> list[Sample]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1
        return [Sample(float(slot % 2), None) for _ in range(count)]

    for streaming in (False, True):
        peak = 0
        spec = SEQ_BALANCE.with_(streaming=streaming)
        asyncio.run(run_adaptive_step(spec, list(range(6)), counting, max_concurrency=2))
        assert peak == 2


def test_bad_generators_and_methods_are_refused():
    async def short(slot: int, count: int) -> list[Sample]:
        return [Sample(0.0, None)] * (count - 1)

    started: list[int] = []
    cancelled: list[int] = []

    async def failing(slot: int, count: int) -> list[Sample]:  # a broken generator, not a failed request
        started.append(slot)
        if slot == 0:
            return [Sample(0.0, None)] * (count + 1)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(slot)
            raise
        return []

    for streaming in (False, True):
        spec = SEQ_BALANCE.with_(streaming=streaming)
        with pytest.raises(RuntimeError, match="returned 7 samples for 8"):
            asyncio.run(run_adaptive_step(spec, [0, 1], short))
        started.clear()
        cancelled.clear()
        with pytest.raises(RuntimeError, match="returned 9 samples for 8"):
            asyncio.run(run_adaptive_step(spec, [0, 1, 2], failing))
        assert sorted(cancelled) == [1, 2]
    with pytest.raises(ValueError, match="filter_groups"):
        asyncio.run(run_adaptive_step(SamplerSpec(kind="dapo"), [0], short))


# ---- failed requests: retried, then contained to their prompt (issue 12a) --------------------------
class FlakyScenario(Scenario):
    """A Scenario whose server raises for the calls `fails(slot, call_index)` picks (a lost request)."""

    def __init__(self, tok, rules: list[Rule], fails: Callable[[int, int], bool], **kwargs) -> None:
        self.fails = fails
        super().__init__(tok, rules, **kwargs)

    def script(self, prompt_ids: list[int], call_index: int) -> str:
        slot = self.slot_of[tuple(prompt_ids)]
        if self.fails(slot, call_index):
            raise ConnectionError(f"server lost the request for prompt {slot}")
        return super().script(prompt_ids, call_index)


FLAKY_RULES = [lambda c: c % 4 == 0, lambda c: False, lambda c: c % 2 == 0, lambda c: True]


@pytest.mark.parametrize("streaming", [False, True])
def test_a_request_that_fails_once_is_retried_and_the_step_is_unchanged(tok, streaming):
    from repro.verl_plugin.ada_loop import GENERATE_RETRIES

    assert GENERATE_RETRIES >= 1
    spec = SEQ_BALANCE.with_(streaming=streaming)
    clean = Scenario(tok, FLAKY_RULES).run(spec)
    sc = FlakyScenario(tok, FLAKY_RULES, fails=lambda slot, c: slot == 1 and c == 0)  # never-right: any call alike
    out = sc.run(spec)
    assert out.failed == {}
    assert out.pool_size == clean.pool_size and out.kept_index == clean.kept_index
    assert all(rewards_of(out.pools[s]) == rewards_of(clean.pools[s]) for s in clean.pools)
    assert len(out.kept[1]) == 4 and out.result.included.all()
    assert out.metrics["sampler/failed_prompts"] == 0 and out.metrics["sampler/generate_retries"] == 1
    assert sc.server.call_counts[tuple(sc.prompts[1])] == 32 + 8  # the failed batch of 8, then the pool


@pytest.mark.parametrize("streaming", [False, True])
def test_a_prompt_that_always_fails_is_dropped_and_the_step_finishes(tok, streaming):
    from repro.verl_plugin.ada_loop import GENERATE_RETRIES

    spec = SEQ_BALANCE.with_(streaming=streaming)
    clean = Scenario(tok, FLAKY_RULES).run(spec)
    sc = FlakyScenario(tok, FLAKY_RULES, fails=lambda slot, c: slot == 2)
    out = sc.run(spec)
    assert set(out.failed) == {2} and "ConnectionError" in out.failed[2]
    assert sc.server.call_counts[tuple(sc.prompts[2])] == (1 + GENERATE_RETRIES) * 8  # bounded retries
    assert out.kept[2] == [] and out.kept_index[2] == [] and not out.result.included[2]
    assert all(slot != 2 for slot, _, _ in out.rows())
    for s in (0, 1, 3):  # every other prompt's pool and update group is intact
        assert out.pool_size[s] == clean.pool_size[s] and out.kept_index[s] == clean.kept_index[s]
        assert rewards_of(out.pools[s]) == rewards_of(clean.pools[s])
        assert out.kept_advantage[s] == pytest.approx(clean.kept_advantage[s])
        assert out.result.included[s]
    m = out.metrics
    assert m["sampler/failed_prompts"] == 1 and m["sampler/generate_retries"] == GENERATE_RETRIES
    assert m["sampler/update_prompts"] == 3 and m["sampler/update_size"] == 12
    assert m["sampler/unresolved"] == clean.metrics["sampler/unresolved"]  # a failed prompt is not "unresolved"


def test_a_failed_prompt_teaches_the_est_estimator_nothing(tok):
    ids = [f"p{slot}" for slot in range(4)]
    spec = SamplerSpec(kind="est", n_avg=8, n_min=2, n_max=32)
    est, reference = make_estimator(spec), make_estimator(spec)
    for e in (est, reference):
        e.update(ids, np.array([1, 3, 5, 7]), np.full(4, 8))
    sc = FlakyScenario(tok, bernoulli_rules(4, seed=9), fails=lambda slot, c: slot == 0)
    out = asyncio.run(run_adaptive_step(spec, ids, sc.generate, estimator=est))
    assert set(out.failed) == {0} and out.kept[0] == [] and out.metrics["sampler/failed_prompts"] == 1
    # the estimator learns from the other prompts exactly as if p0 had not been in the step
    rest = [1, 2, 3]
    reference.update(ids[1:], [sum(rewards_of(out.pools[s])) for s in rest], [out.pool_size[s] for s in rest])
    np.testing.assert_allclose(est.p_hat(ids), reference.p_hat(ids))
    assert est.prior_mean() == pytest.approx(reference.prior_mean())


def test_a_step_where_every_prompt_fails_raises():
    async def down(slot: int, count: int) -> list[Sample]:
        raise ConnectionError("server down")

    for streaming in (False, True):
        with pytest.raises(RuntimeError, match="every prompt") as info:
            asyncio.run(run_adaptive_step(SEQ_BALANCE.with_(streaming=streaming), [0, 1], down))
        assert isinstance(info.value.__cause__, ConnectionError)
