"""The early exit in the cost model (issue 46), against closed forms: with a slot for every request and a decode
iteration that does not depend on the batch (t1 = 0), each response decodes at t0 a token from its request on, so a
prompt's batch ends at the time its shortest meeting prefix (request order) has all returned, and everything
else follows from the drawn lengths and rewards: what is kept, cancelled and dropped, the tokens, the step time
of the synchronous rounds and of the streams, and the overlapped schedule's tokens."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from repro import catalog
from repro.sampling.early_exit import shortest_meeting_prefix
from repro.simulate.cost import LengthModel, TrainModel, _Draws, run_step
from repro.simulate.engine import ServerModel
from repro.simulate.overlap import simulate_overlap

T0 = 0.01
PROMPTS = 40


def _expected(spec, draws: _Draws, ids) -> dict:
    """Per prompt, its rounds written out: each round's end (in tokens from its start), tokens decoded, and
    responses kept, cancelled (still decoding at the end) and dropped (back by then, past the prefix)."""
    out = {"ends": [], "tokens": 0.0, "cancelled": 0, "dropped": 0, "pools": []}
    for prompt in ids:
        pool, ends = np.zeros(0), []
        for _round in range(spec.max_rounds):
            rewards, lengths = draws.next(prompt, spec.round_size)
            keep = shortest_meeting_prefix(spec, np.concatenate([pool, rewards]))
            if keep is None:  # undecided: the whole round returns
                end, kept = float(lengths.max()), spec.round_size
            else:
                kept = keep - pool.size
                end = float(lengths[:kept].max())
                past = lengths[kept:]
                out["cancelled"] += int((past > end).sum())
                out["dropped"] += int((past <= end).sum())
            out["tokens"] += float(np.minimum(lengths, end).sum())
            pool, ends = np.concatenate([pool, rewards[:kept]]), [*ends, end]
            if keep is not None:
                break
        out["ends"].append(ends)
        out["pools"].append(pool.size)
    return out


@pytest.mark.parametrize("streaming", [False, True])
def test_the_exit_ends_each_batch_when_its_shortest_meeting_prefix_is_back(streaming: bool) -> None:
    spec = dataclasses.replace(catalog.get_method("seq-balance-exit").sampler_spec(seed=0), streaming=streaming)
    rates = np.random.default_rng(1).uniform(0.05, 0.95, PROMPTS)
    server = ServerModel(replicas=1, capacity=10_000, t0=T0, t1=0.0, prefill_per_token=0.0)
    lengths = LengthModel(100, 300, 0.7, 2000)
    ids = list(range(PROMPTS))
    cost = run_step(spec, ids, _Draws(rates, lengths, 5, 2), server, TrainModel())
    want = _expected(spec, _Draws(rates, lengths, 5, 2), ids)
    assert cost.pool_sizes.tolist() == want["pools"]  # the sequential sampler's pools
    assert cost.generated_tokens == pytest.approx(want["tokens"], rel=1e-9)
    assert cost.cancelled_responses == want["cancelled"] > 10
    assert want["dropped"] > 0  # both kinds occur: the test sees the difference
    ends = want["ends"]
    if streaming:  # each prompt's rounds back to back; the step ends with the slowest chain
        assert cost.generation_s == pytest.approx(T0 * max(sum(e) for e in ends), rel=1e-9)
    else:  # a round waits for its slowest prompt's end
        rounds = max(len(e) for e in ends)
        barrier = sum(max(e[r] for e in ends if len(e) > r) for r in range(rounds))
        assert cost.generation_s == pytest.approx(T0 * barrier, rel=1e-9)
    off = run_step(dataclasses.replace(spec, early_exit="off"), ids, _Draws(rates, lengths, 5, 2), server, TrainModel())
    assert cost.generated_tokens < off.generated_tokens and cost.generation_s <= off.generation_s * (1 + 1e-12)


def test_the_overlapped_schedule_counts_only_the_tokens_decoded() -> None:
    """One step ahead or none, the overlapped schedule's tokens per step are the closed form's."""
    spec = dataclasses.replace(catalog.get_method("seq-balance-exit").sampler_spec(seed=0), streaming=True)
    rates = np.random.default_rng(2).uniform(0.05, 0.95, 400)
    server = ServerModel(replicas=1, capacity=10_000, t0=T0, t1=0.0, prefill_per_token=0.0)
    lengths = LengthModel(100, 300, 0.7, 2000)
    order = np.random.default_rng(3).permutation(400)
    batches = [order[i * PROMPTS : (i + 1) * PROMPTS].tolist() for i in range(3)]
    queue = iter(batches)
    over = simulate_overlap(
        spec, rates, server=server, lengths=lengths, train=TrainModel(), steps=2, batch=PROMPTS, seed=7,
        draw_prompts=lambda k: next(queue), ahead=0,
    )  # fmt: skip
    for step, ids in enumerate(batches):
        want = _expected(spec, _Draws(rates, lengths, 7, step), ids)
        assert over.tokens_per_step[step] == pytest.approx(want["tokens"], rel=1e-9)
