"""The simplest driver: synchronous rounds with a barrier, as the paper's Seq runs.

`sample` returns, for the given slots and counts, a [len(slots), max(counts)] array of rewards (only
the first counts[i] of row i are read). The simulator and the CPU trainer use this loop; the verl
plugin has its own asynchronous one around the same `StepSampler`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from repro.sampling.step import StepResult, StepSampler

SampleFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
DrawFn = Callable[[int], Sequence[Hashable]]


def run_step_sync(sampler: StepSampler, sample: SampleFn, draw_prompts: DrawFn | None = None) -> StepResult:
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
            break
        sampler.observe_many(slots, sample(slots, counts))
    return sampler.finalize()
