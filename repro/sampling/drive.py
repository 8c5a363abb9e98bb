"""The simplest driver: synchronous rounds with a barrier, as the paper's Seq runs.

`sample` returns, for the given slots and counts, a [len(slots), max(counts)] array of rewards (only
the first counts[i] of row i are read). The simulator and the CPU trainer use this loop; the verl
plugin has its own asynchronous one around the same `StepSampler`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence

import numpy as np

from repro.sampling.step import StepResult, StepSampler

SampleFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
DrawFn = Callable[[int], Sequence[Hashable]]


def sync_rounds(sampler: StepSampler, draw_prompts: DrawFn | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A step's rounds with a barrier, each as `plan()` gives it (slots, counts), with the fresh prompts a
    method asks for (DAPO, GRESO) drawn before it; the caller reports the round's rewards before it asks for the
    next, and calls `finalize()` after the last. `run_step_sync` reports a round at once; the CPU trainer, which
    cancels responses mid-decode under the early exit, reports each as it ends."""
    while True:
        wanted = sampler.prompts_wanted()
        if wanted:
            if draw_prompts is None:
                raise ValueError("this method refills prompts (DAPO): pass draw_prompts")
            sampler.add_prompts(draw_prompts(wanted))
        slots, counts = sampler.plan()
        if slots.size == 0:
            if sampler.prompts_wanted():  # every prompt drawn was skipped (GRESO): draw again
                continue
            return
        yield slots, counts


def run_step_sync(sampler: StepSampler, sample: SampleFn, draw_prompts: DrawFn | None = None) -> StepResult:
    """Rounds with a barrier. Under the early exit every response of a round returns at once (no time passes
    here), so each prompt keeps the shortest request-order prefix that meets its rule and the rest is dropped."""
    for slots, counts in sync_rounds(sampler, draw_prompts):
        rewards = sample(slots, counts)
        if sampler.spec.early_exit == "off":
            sampler.observe_many(slots, rewards)
        else:
            sampler.returned_all(slots, rewards)
    return sampler.finalize()
