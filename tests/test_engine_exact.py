"""The array-based `BatchingEngine` against the server-by-server loop it replaced (written out below): the
same finishes at the same times and the same totals, bit for bit, on random workloads."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from repro.simulate.engine import _EPS, BatchingEngine, ServerModel


class LoopEngine:
    """The server-by-server engine: one array of tokens left per server, appended and filtered in place."""

    def __init__(self, model: ServerModel) -> None:
        self.model = model
        self.now = 0.0
        self._queue: deque[tuple[int, float]] = deque()
        self._ids: list[list[int]] = [[] for _ in range(model.replicas)]
        self._left: list[np.ndarray] = [np.zeros(0) for _ in range(model.replicas)]
        self._stall = np.zeros(model.replicas)
        self.tokens = self.busy = self.queued_until = self.full = 0.0

    @property
    def idle(self) -> bool:
        return not self._queue and all(ids == [] for ids in self._ids)

    def submit(self, request_id: int, tokens: int) -> None:
        self._queue.append((request_id, float(tokens)))
        self._admit()

    def _admit(self) -> None:
        model = self.model
        while self._queue:
            loads = [len(ids) for ids in self._ids]
            replica = int(np.argmin(loads))
            if loads[replica] >= model.capacity:
                return
            request_id, tokens = self._queue.popleft()
            self._ids[replica].append(request_id)
            self._left[replica] = np.append(self._left[replica], tokens)
            self._stall[replica] += model.prefill_per_token * model.prompt_tokens

    def time_to_next(self) -> float:
        best = np.inf
        for replica, left in enumerate(self._left):
            if left.size:
                best = min(best, self._stall[replica] + left.min() * self.model.iteration(left.size))
        return float(best)

    def advance(self, dt: float) -> list[tuple[int, float]]:
        done: list[tuple[int, float]] = []
        if self._queue:
            self.queued_until = self.now + dt
        if sum(len(ids) for ids in self._ids) == self.model.replicas * self.model.capacity:
            self.full += dt
        for replica, left in enumerate(self._left):
            if not left.size and self._stall[replica] <= 0:
                continue
            stall = min(self._stall[replica], dt)
            self._stall[replica] -= stall
            self.busy += dt if left.size else stall
            if not left.size:
                continue
            step = self.model.iteration(left.size)
            progress = min((dt - stall) / step, float(left.max()))
            self.tokens += progress * left.size
            left = left - progress
            finished = left <= _EPS
            if finished.any():
                ids = self._ids[replica]
                done += [(ids[i], self.now + dt) for i in np.flatnonzero(finished)]
                self.tokens += float(left[finished].sum())
                self._ids[replica] = [r for r, f in zip(ids, finished, strict=True) if not f]
                left = left[~finished]
            self._left[replica] = left
        self.now += dt
        if done:
            self._admit()
        return done

    def cancel(self, request_ids) -> dict[int, float]:
        wanted, out = set(request_ids), {}
        for request_id, tokens in self._queue:
            if request_id in wanted:
                out[request_id] = tokens
        self._queue = deque(item for item in self._queue if item[0] not in wanted)
        for replica, ids in enumerate(self._ids):
            stay = np.array([request_id not in wanted for request_id in ids], dtype=bool)
            for request_id, left in zip(ids, self._left[replica].tolist(), strict=True):
                if request_id in wanted:
                    out[request_id] = left
            self._ids[replica] = [r for r, s in zip(ids, stay, strict=True) if s]
            self._left[replica] = self._left[replica][stay] if stay.size else self._left[replica]
        if out:
            self._admit()
        return out


def _totals(engine) -> tuple[float, ...]:
    return (engine.now, engine.tokens, engine.busy, engine.queued_until, engine.full)


@pytest.mark.parametrize("seed", range(6))
def test_the_array_engine_replays_the_loop_engine_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    model = ServerModel(
        replicas=int(rng.integers(1, 5)), capacity=int(rng.integers(1, 9)), t0=0.012, t1=6e-5,
        prefill_per_token=float(rng.choice([0.0, 2e-5])), prompt_tokens=300,
    )  # fmt: skip
    new, old = BatchingEngine(model), LoopEngine(model)
    next_id, running_cancelled = 0, 0
    for _ in range(300):
        if rng.random() < 0.4 or old.idle:  # a burst of requests, equal lengths among them now and then
            lengths = rng.integers(1, 60, size=int(rng.integers(1, 12)))
            if rng.random() < 0.3:
                lengths[:] = lengths[0]
            ids = list(range(next_id, next_id + lengths.size))
            if rng.random() < 0.5:  # a batch at once (what the schedules send), or one by one
                new.submit_many(ids, lengths.tolist())
            else:
                for request_id, length in zip(ids, lengths.tolist(), strict=True):
                    new.submit(request_id, length)
            for request_id, length in zip(ids, lengths.tolist(), strict=True):
                old.submit(request_id, length)
            next_id += lengths.size
        # now and then part of the way to the next finish, as the asyncio emulator moves
        share = float(rng.choice([0.0, 0.5, 0.999])) if rng.random() < 0.3 else 1.0
        dt = old.time_to_next() * share
        assert new.time_to_next() == old.time_to_next()
        assert new.advance(dt) == old.advance(dt)
        assert _totals(new) == _totals(old)
        assert new.idle == old.idle
        if rng.random() < 0.2 and next_id:  # the early exit: cancel some requests, queued, running or finished
            ids = rng.choice(next_id, size=min(next_id, int(rng.integers(1, 6))), replace=False).tolist()
            running = {int(i) for i in new._ids[new._left == new._left].tolist()} & set(ids)  # non-NaN slots
            stopped = new.cancel(ids)
            assert stopped == old.cancel(ids)
            running_cancelled += len(running)
            assert all(stopped[i] > 0 for i in running)  # a running request stops with tokens left
            assert _totals(new) == _totals(old) and new.time_to_next() == old.time_to_next()
            assert new.running() == sum(len(ids) for ids in old._ids)
    assert running_cancelled >= 5  # the cancellations hit running requests, not only queued or finished ones
