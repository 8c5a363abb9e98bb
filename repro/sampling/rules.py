"""Exit rules of Reinforce-Ada-Seq, on positive/negative counts so pools never need rescanning."""

from __future__ import annotations

import numpy as np

from repro.sampling.settings import SeqSettings
from repro.sampling.spec import SamplerSpec


def exit_met(spec: SamplerSpec | SeqSettings, n_pos: np.ndarray, n_total: np.ndarray) -> np.ndarray:
    """Whether each pool satisfies the method's exit rule (vectorised over prompts).

    seq-pos stops at `k_pos` positives: sampling until a fixed number of successes costs k/p draws in
    expectation, the 1/p weight of the log objective. seq-balance also wants n/2 negatives, so the
    downsampled group of n can always be half and half.
    """
    n_pos = np.asarray(n_pos)
    n_neg = np.asarray(n_total) - n_pos
    if spec.exit_rule == "pos":
        return n_pos >= spec.k_pos
    half = spec.n // 2
    return (n_pos >= half) & (n_neg >= half)


def required_positives(spec: SamplerSpec | SeqSettings) -> int:
    return spec.k_pos if spec.exit_rule == "pos" else spec.n // 2


def required_negatives(spec: SamplerSpec | SeqSettings) -> int:
    return 0 if spec.exit_rule == "pos" else spec.n // 2
