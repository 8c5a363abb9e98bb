"""The early exit through the verl manager's driver (issue 46): `run_adaptive_step` with a `Streamed` whose
responses return in the order of their lengths, one instant per length; the pools are the sequential sampler's
prefixes and exactly the responses not back when the rule held are cancelled. The driver's Ray side
(`rollout.AdaWorker.ada_*`, the abortable client) runs in a real verl + vLLM-CPU run (see the issue's note)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from repro import catalog
from repro.sampling.early_exit import shortest_meeting_prefix
from repro.verl_plugin.ada_loop import run_adaptive_step


class LengthOrdered:
    """Each batch's responses (reward, length) drawn from a per-prompt stream; `wait` hands back the next
    length's returns (every response of that length, all at once)."""

    def __init__(self, p: list[float], seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.p = p
        self.streams: dict[int, list[tuple[float, int]]] = {slot: [] for slot in range(len(p))}
        self.batches: dict[int, list[tuple[float, int]]] = {}
        self.told: dict[int, set[int]] = {}
        self.cancelled: dict[int, list[int]] = {slot: [] for slot in range(len(p))}
        self.kept: dict[int, list[tuple[float, int]]] = {slot: [] for slot in range(len(p))}

    async def start(self, slot: int, count: int) -> None:
        draws = [(float(self.rng.random() < self.p[slot]), int(self.rng.integers(1, 6))) for _ in range(count)]
        self.streams[slot] += draws
        self.batches[slot], self.told[slot] = draws, set()

    async def wait(self, slot: int) -> list[tuple[int, float]]:
        await asyncio.sleep(0)  # other prompts' batches run meanwhile
        batch, told = self.batches[slot], self.told[slot]
        length = min(length for k, (_, length) in enumerate(batch) if k not in told)
        back = [k for k, (_, le) in enumerate(batch) if le == length and k not in told]
        told.update(back)
        return [(k, batch[k][0]) for k in back]

    async def cancel(self, slot: int, positions: list[int]) -> None:
        assert not set(positions) & self.told[slot], "only responses still in flight are cancelled"
        self.cancelled[slot] += positions

    async def end(self, slot: int, kept: list[int]) -> None:
        self.kept[slot] += [self.batches[slot][k] for k in kept]


async def _nothing(slot: int, count: int):
    raise AssertionError("the early exit does not draw whole batches")


@pytest.mark.parametrize("streaming", [False, True])
def test_the_driver_keeps_each_prompts_shortest_meeting_prefix_and_cancels_what_was_in_flight(streaming) -> None:
    spec = catalog.get_method("seq-balance-exit").sampler_spec(seed=0, streaming=streaming)
    p = list(np.linspace(0.05, 0.95, 24))
    streamed = LengthOrdered(p, seed=1)
    step = asyncio.run(run_adaptive_step(spec, [f"q{i}" for i in range(24)], _nothing, streamed=streamed))
    cancelled = 0
    for slot in range(24):
        stream = streamed.streams[slot]
        keep = shortest_meeting_prefix(spec, np.array([r for r, _ in stream]))
        kept = stream if keep is None else stream[:keep]
        assert streamed.kept[slot] == kept  # the sequential sampler's pool, in request order
        assert step.pool_size[slot] == len(kept)
        assert [s.reward for s in step.pools[slot]] == [r for r, _ in kept]
        if keep is not None:  # the last batch: everything past the prefix still decoding was cancelled
            batch = streamed.batches[slot]
            start = len(stream) - len(batch)
            decided = max(length for _, length in stream[start:keep])
            assert streamed.cancelled[slot] == [k for k in range(keep - start, len(batch)) if batch[k][1] > decided]
        cancelled += len(streamed.cancelled[slot])
    assert cancelled > 10 and step.metrics["exit/responses_cancelled"] == cancelled
    assert step.metrics["exit/responses_dropped"] > 0


def test_the_abortable_client_records_its_sessions_request_and_abort_finds_it(monkeypatch) -> None:
    from omegaconf import OmegaConf
    from verl.workers.rollout.llm_server import LLMServerClient

    from repro.verl_plugin import abortable

    calls: list[dict] = []

    class Server:  # vLLMHttpServer.abort_request's reply: not found until the engine has the request
        class abort_request:  # a Ray actor method's shape: .remote(...) -> awaitable
            @staticmethod
            async def remote(**kwargs):
                calls.append(kwargs)
                return {"aborted": len(calls) >= 3, "request_id": kwargs["request_id"]}

    async def acquire(self, request_id, **extra):
        return "server-0", Server

    monkeypatch.setattr(LLMServerClient, "_acquire_server", acquire)
    monkeypatch.setattr(abortable, "ABORT_WAIT_S", 0.0)
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"full_determinism": False}}})
    client = abortable.AbortableLLMServerClient(config=config)

    async def session(record):
        abortable.INFLIGHT.set(record)
        await client._acquire_server("caller-id")
        return client._vllm_request_id("caller-id")

    async def main():
        record: dict = {}
        vllm_id = await asyncio.ensure_future(session(record))
        assert record == {"server": Server, "request_id": vllm_id} and vllm_id != "caller-id"  # a fresh uuid
        assert await abortable.abort(record, asyncio.get_running_loop().create_future()) is True
        assert [c["request_id"] for c in calls] == [vllm_id] * 3 and not calls[0]["reset_prefix_cache"]
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        assert await abortable.abort(record, done) is False  # the session ended first: nothing to abort
        assert await client._acquire_server("x") == ("server-0", Server)  # outside a session: verl's client

    asyncio.run(main())
