"""The cost model's server (`engine.BatchingEngine`) run in real time under asyncio, scaled down.

Each `await run(tokens)` is one request: it enters the shared engine and returns when the engine says
that response is done. One background task wakes at every predicted finish, or early when a request
arrives, and advances the engine by the wall-clock time that has really passed (divided by `scale`), so
the schedule a client produces (barriers, streams, the event loop's own overheads) is what is timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

from repro.simulate.engine import BatchingEngine, ServerModel


class AsyncBatchingEngine:
    def __init__(self, model: ServerModel, scale: float) -> None:
        """`scale`: wall seconds per model second (0.02 turns a 200 s step into 4 s)."""
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.engine = BatchingEngine(model)
        self.scale = scale
        self._futures: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()
        self._last: float | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def _sync(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        if self._last is not None and now > self._last:
            for request_id, _t in self.engine.advance((now - self._last) / self.scale):
                future = self._futures.pop(request_id)
                if not future.done():
                    future.set_result(None)
        self._last = now

    async def run(self, tokens: int) -> None:
        loop = asyncio.get_running_loop()
        if self._wake is None:
            self._wake = asyncio.Event()
        self._sync(loop)
        request_id = next(self._ids)
        future = loop.create_future()
        self._futures[request_id] = future
        self.engine.submit(request_id, int(tokens))
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drive())
        await future

    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        while self._futures:
            self._sync(loop)
            if not self._futures:
                break
            wait = self.engine.time_to_next() * self.scale
            self._wake.clear()
            with contextlib.suppress(TimeoutError):  # a finish is due, or a request arrived early
                await asyncio.wait_for(self._wake.wait(), timeout=max(wait, 0.0))
        self._last = None  # idle: the model's clock stands still until the next request
