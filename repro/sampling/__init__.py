"""The algorithm core: framework-free (numpy only) samplers shared by every driver."""

from repro.sampling.allocation import (
    allocate,
    continuous_allocation,
    inverse_allocation,
    largest_remainder,
    residual_weights,
)
from repro.sampling.drive import run_step_sync
from repro.sampling.estimator import BetaBernoulliEstimator, make_estimator
from repro.sampling.policies import POLICIES, Memory, Policy, policy_for
from repro.sampling.result import StepResult
from repro.sampling.spec import SamplerSpec
from repro.sampling.step import DapoCapExceeded, StepSampler


def estimator_for(spec: SamplerSpec) -> Memory | None:
    """The state a run keeps across steps for this method (None: its policy keeps none)."""
    return policy_for(spec).new_memory()


__all__ = [
    "POLICIES",
    "BetaBernoulliEstimator",
    "DapoCapExceeded",
    "Memory",
    "Policy",
    "SamplerSpec",
    "StepResult",
    "StepSampler",
    "allocate",
    "continuous_allocation",
    "estimator_for",
    "inverse_allocation",
    "largest_remainder",
    "make_estimator",
    "policy_for",
    "residual_weights",
    "run_step_sync",
]
