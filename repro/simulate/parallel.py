"""The methods of one `repro simulate` command, side by side in worker processes.

A method's simulation depends only on its arguments (its seeds are in them), so the process that runs it
changes no number: the results are the serial ones, returned in the methods' order. What a method's
processes share is a cache of response streams (`workload._Draws`), which only saves drawing them again.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

_STREAMS: dict | None = None  # a worker's streams, shared by the methods it runs


def _start_worker() -> None:
    global _STREAMS
    _STREAMS = {}


def _run(task: Callable[..., Any], name: str, spec: Any, kwargs: dict[str, Any], share: bool) -> Any:
    return task(name, spec, **({**kwargs, "streams": _STREAMS} if share else kwargs))


def run_methods(
    task: Callable[..., Any],
    specs: Sequence[tuple[str, Any]],
    kwargs: dict[str, Any],
    *,
    jobs: int,
    share_streams: bool = False,
    on_step: Callable[[], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    on_done: Callable[[str], None] | None = None,
) -> list[Any]:
    """`task(name, spec, **kwargs)` for each (name, spec), `jobs` at a time; with `share_streams` each call
    also gets `streams=`, one dict per process. `on_start` and `on_done` hear of each method; serially,
    `on_step` is passed on to the task too."""
    if jobs <= 1 or len(specs) <= 1:
        streams: dict = {}
        out = []
        for name, spec in specs:
            if on_start:
                on_start(name)
            extra = {"streams": streams} if share_streams else {}
            out.append(task(name, spec, **kwargs, **extra, on_step=on_step))
            if on_done:
                on_done(name)
        return out
    results: dict[int, Any] = {}
    context = mp.get_context("spawn")  # no fork of a process that runs a progress bar's thread
    with ProcessPoolExecutor(min(jobs, len(specs)), mp_context=context, initializer=_start_worker) as pool:
        # the catalog lists the adaptive samplers, the slowest to simulate, last: start them first
        order = list(range(len(specs)))[::-1]
        futures = {}
        for i in order:
            if on_start:
                on_start(specs[i][0])
            futures[pool.submit(_run, task, *specs[i], kwargs, share_streams)] = i
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if on_done:
                on_done(specs[futures[future]][0])
    return [results[i] for i in range(len(specs))]
