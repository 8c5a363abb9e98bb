"""A continuous-batching generation server, as a cost model (numpy, no framework).

`replicas` servers each decode up to `capacity` sequences at once; one decode iteration of a server
running r sequences takes ``t0 + t1 * r`` seconds and advances each of them by one token. A request
waits in one shared FIFO queue until some server has a free slot (the least loaded one takes it), and
its prompt's prefill stalls that server for ``prefill_per_token * prompt_tokens`` seconds. Tokens are
treated as a continuous quantity between events, which is exact for the event times up to the
sub-iteration rounding a real server would add.

The engine is driven by time: `time_to_next()` says when the next request would finish if nothing else
arrived, and `advance(dt)` moves every server forward by `dt` seconds, returning what finished. The
discrete simulator jumps from event to event; the asyncio emulator (`repro.simulate.emulated_server`)
advances by the wall-clock time that really passed, so both run the same model.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass

import numpy as np

_EPS = 1e-9


@dataclass(frozen=True)
class ServerModel:
    """Defaults: one 8xH100 node serving Qwen2.5-Math-1.5B with TP=1 (8 vLLM replicas), vLLM's
    max_num_seqs of 256, and per-iteration costs typical of a 1.5B model in bf16 (this project's
    assumptions; the paper reports only step times)."""

    replicas: int = 8
    capacity: int = 256
    t0: float = 0.012  # s per decode iteration, whatever the batch
    t1: float = 6e-5  # s per decode iteration per running sequence
    prefill_per_token: float = 2e-5  # s of server time per prompt token
    prompt_tokens: int = 300

    def iteration(self, running: int) -> float:
        return self.t0 + self.t1 * running

    @property
    def peak_throughput(self) -> float:
        """Tokens per second with every slot of every server busy: the bound no schedule can beat."""
        return self.replicas * self.capacity / self.iteration(self.capacity)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


class BatchingEngine:
    def __init__(self, model: ServerModel) -> None:
        if model.replicas < 1 or model.capacity < 1:
            raise ValueError("replicas and capacity must be at least 1")
        self.model = model
        self.now = 0.0
        self._queue: deque[tuple[int, float]] = deque()
        self._ids: list[list[int]] = [[] for _ in range(model.replicas)]
        self._left: list[np.ndarray] = [np.zeros(0) for _ in range(model.replicas)]
        self._stall = np.zeros(model.replicas)  # prefill seconds still to serve before decoding resumes
        self.tokens = 0.0  # tokens generated so far
        self.busy = 0.0  # server-seconds with at least one sequence or a prefill
        self.queued_until = 0.0  # the last time a request was still waiting for a slot
        self.full = 0.0  # seconds during which every slot of every server was taken

    @property
    def idle(self) -> bool:
        return not self._queue and all(ids == [] for ids in self._ids)

    def running(self) -> int:
        return sum(len(ids) for ids in self._ids)

    def submit(self, request_id: int, tokens: int) -> None:
        if tokens < 1:
            raise ValueError(f"request {request_id}: a response has at least one token, got {tokens}")
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
        """Seconds until the next request finishes if nothing arrives; inf when nothing is running."""
        best = np.inf
        for replica, left in enumerate(self._left):
            if left.size:
                best = min(best, self._stall[replica] + left.min() * self.model.iteration(left.size))
        return float(best)

    def advance(self, dt: float) -> list[tuple[int, float]]:
        """Move every server forward by `dt` seconds; (request id, finish time) of every finished request."""
        if dt < 0:
            raise ValueError(f"cannot go back in time ({dt})")
        done: list[tuple[int, float]] = []
        if self._queue:
            self.queued_until = self.now + dt
        if self.running() == self.model.replicas * self.model.capacity:
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
                self.tokens += float(left[finished].sum())  # the rounding remainder belongs to them
                self._ids[replica] = [r for r, f in zip(ids, finished, strict=True) if not f]
                left = left[~finished]
            self._left[replica] = left
        self.now += dt
        if done:
            self._admit()
        return done

    def step(self) -> list[tuple[int, float]]:
        """Jump to the next finish (the discrete simulator's move)."""
        dt = self.time_to_next()
        if not np.isfinite(dt):
            raise RuntimeError("nothing is running")
        return self.advance(dt)
