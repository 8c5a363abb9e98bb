"""A finished step's sampling outcome (`StepResult`), in its own module so both the sampler that builds it
(`repro.sampling.step`) and the metrics that read it (`repro.sampling.metrics`) import it from below."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from repro.sampling.spec import SamplerSpec


@dataclass
class StepResult:
    """What the update needs, flat over kept responses, plus per-prompt pool statistics."""

    spec: SamplerSpec
    prompt_ids: list[Hashable]
    pool_size: np.ndarray  # [slots] responses drawn
    pool_positives: np.ndarray  # [slots]
    pool_mean: np.ndarray  # [slots] mean reward over the whole pool: the global baseline
    weight: np.ndarray  # [slots] Est residual weight (1 elsewhere)
    included: np.ndarray  # [slots] whether the prompt has an update group
    rounds: np.ndarray  # [slots] request batches completed
    exit_round: np.ndarray  # [slots] round the exit rule was met, 0 if never (seq only)
    slot: np.ndarray  # [rows] prompt slot of each kept response
    index: np.ndarray  # [rows] arrival position of the response within its pool
    reward: np.ndarray  # [rows]
    advantage: np.ndarray  # [rows]
    metrics: dict[str, float] = field(default_factory=dict)
    failed: np.ndarray | None = None  # [slots] prompts whose generation failed (`StepSampler.fail`); never included
    # the advantage as A = (r - baseline[slot]) * scale[slot], where a policy defines it that way (the bench's
    # families); None: (pool_mean, weight), with the verl estimator's own std option (Seq, Est)
    baseline: np.ndarray | None = None
    scale: np.ndarray | None = None

    def group(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Kept arrival indices and their advantages for one prompt."""
        rows = self.slot == slot
        return self.index[rows], self.advantage[rows]
