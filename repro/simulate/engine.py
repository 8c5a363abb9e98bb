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

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

_EPS = 1e-9
_sum, _min = np.add.reduce, np.minimum.reduce  # what ndarray.sum and .min call, without their wrappers


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
    """Each server's running requests sit in a row of one [replicas, capacity] array of tokens left (NaN where a
    slot is free), so that an event moves every request with one array subtraction; a server's shortest and
    longest request and its stall are plain floats beside it. Both extremes follow from one subtraction
    each, because subtracting the same number keeps a row in order (rounding is monotone), and are read
    from the row again only when a request joins or leaves it. Every float operation is the one a
    server-by-server loop over per-server arrays does, in the same order where order counts (the running
    totals add server by server; finished requests are reported and summed in slot order), so event times
    and totals are the same to the last bit (tests/test_engine_exact.py replays that loop)."""

    def __init__(self, model: ServerModel) -> None:
        if model.replicas < 1 or model.capacity < 1:
            raise ValueError("replicas and capacity must be at least 1")
        self.model = model
        self.now = 0.0
        self._queue: deque[tuple[int, float]] = deque()
        replicas = model.replicas
        self._left = np.full((replicas, model.capacity), np.nan)  # row r: server r's requests, arrival order
        self._ids = np.zeros((replicas, model.capacity), dtype=np.int64)  # their request ids, as `_left`
        self._count = [0] * replicas  # running requests per server
        self._shortest = [0.0] * replicas  # tokens left of each server's shortest request (when it has one)
        self._longest = [0.0] * replicas
        self._stall = [0.0] * replicas  # prefill seconds still to serve before decoding resumes
        self._steps = np.zeros((replicas, 1))  # tokens each server decodes in an `advance`
        # one decode iteration with r running, as `ServerModel.iteration` computes it
        self._iteration = [model.iteration(r) for r in range(model.capacity + 1)]
        self._prefill = model.prefill_per_token * model.prompt_tokens
        self.tokens = 0.0  # tokens generated so far
        self.busy = 0.0  # server-seconds with at least one sequence or a prefill
        self.queued_until = 0.0  # the last time a request was still waiting for a slot
        self.full = 0.0  # seconds during which every slot of every server was taken

    @property
    def idle(self) -> bool:
        return not self._queue and not any(self._count)

    def running(self) -> int:
        return sum(self._count)

    def submit(self, request_id: int, tokens: int) -> None:
        if tokens < 1:
            raise ValueError(f"request {request_id}: a response has at least one token, got {tokens}")
        self._queue.append((request_id, float(tokens)))
        self._admit()

    def submit_many(self, request_ids: Sequence[int], tokens: Sequence[int]) -> None:
        """`submit` each in order: the same admissions, as no time passes between them."""
        for request_id, length in zip(request_ids, tokens, strict=True):
            if length < 1:
                raise ValueError(f"request {request_id}: a response has at least one token, got {length}")
        self._queue.extend((request_id, float(length)) for request_id, length in zip(request_ids, tokens, strict=True))
        self._admit()

    def _admit(self) -> None:
        capacity, count = self.model.capacity, self._count
        while self._queue:
            replica = count.index(min(count))  # the least loaded, the first of equals (argmin)
            n = count[replica]
            if n >= capacity:
                return
            request_id, tokens = self._queue.popleft()
            self._ids[replica, n] = request_id
            self._left[replica, n] = tokens
            if n:
                self._shortest[replica] = min(self._shortest[replica], tokens)
                self._longest[replica] = max(self._longest[replica], tokens)
            else:
                self._shortest[replica] = self._longest[replica] = tokens
            count[replica] = n + 1
            self._stall[replica] += self._prefill

    def time_to_next(self) -> float:
        """Seconds until the next request finishes if nothing arrives; inf when nothing is running."""
        best = math.inf
        iteration, stall, shortest = self._iteration, self._stall, self._shortest
        for replica, n in enumerate(self._count):
            if n:
                when = stall[replica] + shortest[replica] * iteration[n]
                if when < best:
                    best = when
        return best

    def advance(self, dt: float) -> list[tuple[int, float]]:
        """Move every server forward by `dt` seconds; (request id, finish time) of every finished request."""
        if dt < 0:
            raise ValueError(f"cannot go back in time ({dt})")
        done: list[tuple[int, float]] = []
        if self._queue:
            self.queued_until = self.now + dt
        count, stalls, shortest, longest = self._count, self._stall, self._shortest, self._longest
        iteration = self._iteration
        if sum(count) == self.model.replicas * self.model.capacity:
            self.full += dt
        steps = [0.0] * len(count)
        finishing: list[tuple[int, int, np.ndarray]] = []
        busy, tokens, when = self.busy, self.tokens, self.now + dt
        for replica, n in enumerate(count):  # server by server: the running totals add in this order
            stall = stalls[replica]
            if stall > 0:  # (a server without stall takes min(0, dt) = 0 off it, and dt - 0 is dt)
                stall = stall if stall < dt else dt
                stalls[replica] -= stall
                if not n:
                    busy += stall
                    continue
                step = (dt - stall) / iteration[n]
            elif n:
                step = dt / iteration[n]
            else:
                continue
            busy += dt
            if longest[replica] < step:
                step = longest[replica]
            steps[replica] = step
            tokens += step * n
            shortest[replica] -= step
            longest[replica] -= step
            if shortest[replica] <= _EPS:  # its finished requests' remainders, added right after its tokens
                row = self._left[replica, :n] - step  # what the subtraction below leaves in the row
                ended = (row <= _EPS).nonzero()[0]
                done += [(request_id, when) for request_id in self._ids[replica, ended].tolist()]
                tokens += float(_sum(row[ended]))  # the rounding remainder belongs to them (slot order)
                finishing.append((replica, n, ended))
        self.busy, self.tokens = busy, tokens
        if any(count):
            self._steps[:, 0] = steps
            np.subtract(self._left, self._steps, out=self._left)  # a free slot's NaN stays NaN
        for replica, n, ended in finishing:
            self._drop(replica, n, ended)
        self.now += dt
        if done:
            self._admit()
        return done

    def _drop(self, replica: int, n: int, ended: np.ndarray) -> None:
        """Drop a server's finished requests (slots `ended`, ascending); the rest keep their order. The
        longest stays: it had tokens left, or every request finished."""
        left, ids = self._left[replica], self._ids[replica]
        if ended.size == 1:  # as a rule: shift the slots behind it one down
            slot = int(ended[0])
            left[slot : n - 1] = left[slot + 1 : n]
            ids[slot : n - 1] = ids[slot + 1 : n]
        else:
            stay = np.ones(n, dtype=bool)
            stay[ended] = False
            k = n - ended.size
            left[:k], ids[:k] = left[:n][stay], ids[:n][stay]
        k = n - ended.size
        left[k:n] = np.nan
        self._count[replica] = k
        if k:
            self._shortest[replica] = float(_min(left[:k]))

    def cancel(self, request_ids: Iterable[int]) -> dict[int, float]:
        """Stop requests (the early exit, issue 46): a queued one never starts; a running one frees its slot at
        once, the tokens it decoded staying counted (its prefill too: already served or in the stall). Returns
        {request id: tokens it had left} for each one found; finished or unknown ids are skipped."""
        wanted = set(request_ids)
        out: dict[int, float] = {}
        if self._queue and wanted:
            stay: deque[tuple[int, float]] = deque()
            for request_id, tokens in self._queue:
                if request_id in wanted:
                    out[request_id] = tokens
                else:
                    stay.append((request_id, tokens))
            self._queue = stay
        for replica, n in enumerate(self._count):
            if not n or len(out) == len(wanted):
                continue
            ids = self._ids[replica, :n]
            hit = np.flatnonzero([request_id in wanted for request_id in ids.tolist()])
            if not hit.size:
                continue
            for slot in hit.tolist():
                out[int(ids[slot])] = float(self._left[replica, slot])
            self._drop(replica, n, hit)
            if k := self._count[replica]:  # the longest may have been cancelled: read the row again
                self._longest[replica] = float(np.maximum.reduce(self._left[replica, :k]))
        if out:
            self._admit()
        return out

    def drain(self) -> None:
        """Step until nothing is left (a synchronous round's barrier)."""
        while self._queue or any(self._count):
            self.advance(self.time_to_next())

    def step(self) -> list[tuple[int, float]]:
        """Jump to the next finish (the discrete simulator's move)."""
        dt = self.time_to_next()
        if not np.isfinite(dt):
            raise RuntimeError("nothing is running")
        return self.advance(dt)


def by_owner(finished: list[tuple[int, float]], key_of: Callable[[int], Hashable], waiting: dict) -> dict:
    """The responses that finished in one instant, grouped by whose outstanding batch they are in (`key_of(id)`,
    a key of `waiting`: the ids of that batch), in order of first finish; a response whose batch already ended
    (cut by the early exit) is left out."""
    out: dict = {}
    for request_id, _t in finished:
        key = key_of(request_id)
        ids = waiting.get(key)
        if ids is not None and ids[0] <= request_id <= ids[-1]:
            out.setdefault(key, []).append(request_id)
    return out
