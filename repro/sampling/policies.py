"""Allocation policies: what each method family decides inside one step's sampling.

`StepSampler` keeps the step's bookkeeping (slots, pools in arrival order, outstanding batches, rounds or
streaming, failures); a policy makes the method's decisions on it, through five questions:
- `start`: how many responses each prompt gets first, and its weight (Est sizes both from its estimator);
- `need` and `after_batch`: how many more a prompt gets once a batch came back, and when it is done;
- `prompts_wanted`: whether the step draws fresh prompts (DAPO's refill batches);
- `select`: which responses form each prompt's update group, and which prompts have one;
- `advantage`: the baseline and weight each kept response is scored against.
Adding a method family is one subclass and its settings (`repro.sampling.settings`); the drivers keep
calling the same `StepSampler`. A policy sees the sampler through the `StepView` protocol below.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar, Protocol

import numpy as np

from repro.sampling.advantage import global_baseline_advantage, grpo_advantage, released_est_baseline
from repro.sampling.allocation import allocate, inverse_allocation, residual_weights
from repro.sampling.downsample import select_group
from repro.sampling.estimator import BetaBernoulliEstimator
from repro.sampling.metrics import dapo_metrics, est_metrics, seq_metrics
from repro.sampling.result import StepResult
from repro.sampling.rules import exit_met
from repro.sampling.settings import DapoSettings, EstSettings, SeqSettings, Settings, UniformSettings
from repro.sampling.spec import SamplerSpec

WAITING, OUTSTANDING, FINISHED = 0, 1, 2  # a slot's state: ready for its next batch, awaiting one, done


class StepView(Protocol):
    """What a policy reads of the step's sampler (`repro.sampling.step.StepSampler`); the one array it writes
    is `exit_round` (Seq's exit)."""

    spec: SamplerSpec
    rng: np.random.Generator
    estimator: BetaBernoulliEstimator | None
    target: int  # the step's initial prompts
    gen_batches: int  # generation batches completed (DAPO)
    count: np.ndarray  # [slots] responses scored
    npos: np.ndarray  # [slots] positives among them
    batches: np.ndarray  # [slots] batches completed
    exit_round: np.ndarray  # [slots] the batch the exit rule was met in, 0 if not yet
    quota: np.ndarray  # [slots] the first request's size
    state: np.ndarray  # [slots] WAITING, OUTSTANDING or FINISHED
    weight: np.ndarray  # [slots]
    p_hat: np.ndarray  # [slots] Est's estimate, else empty

    @property
    def num_slots(self) -> int: ...
    @property
    def prompt_ids(self) -> list[Hashable]: ...
    @property
    def failed(self) -> np.ndarray: ...
    def mixed(self) -> np.ndarray: ...


class DapoCapExceeded(RuntimeError):
    """DAPO hit its generation-batch cap before collecting enough mixed groups (verl raises too)."""


class Policy:
    """GRPO (`uniform`): n responses per prompt, all of them in the update, group-normalised advantages."""

    settings_type: ClassVar[type[Settings]] = UniformSettings
    keeps_estimator: ClassVar[bool] = False  # state across steps that drivers create, save and restore
    refills: ClassVar[bool] = False  # draws fresh prompts within a step

    def __init__(self, spec: SamplerSpec) -> None:
        self.spec = spec
        self.settings = self.settings_type.of(spec)

    def start(
        self, prompt_ids: Sequence[Hashable], estimator: BetaBernoulliEstimator | None
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(first request per prompt, weight per prompt or None for 1, p_hat or an empty array)."""
        return np.full(len(prompt_ids), self.settings.n), None, np.ones(0)

    def need(self, s: StepView, slots: np.ndarray) -> np.ndarray:
        """Responses still to request for each slot now (0: done). By default, the first request only."""
        return np.where(s.batches[slots] == 0, s.quota[slots], 0)

    def after_batch(self, s: StepView, slots: np.ndarray) -> None:
        """A batch of each slot came back complete (before `need` is asked again)."""

    def prompts_wanted(self, s: StepView) -> int:
        return 0

    def select(self, s: StepView, valid: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(kept [slots, cap] responses, included [slots] prompts); failed prompts are removed by the sampler."""
        return valid, ~s.failed

    def advantage(
        self, s: StepView, slot: np.ndarray, reward: np.ndarray, pool_mean: np.ndarray, pool_std: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(advantage per kept response, the baseline per prompt the result reports)."""
        st = self.settings
        return grpo_advantage(slot, reward, s.num_slots, st.norm_adv_by_std, st.epsilon), pool_mean

    def metrics(self, s: StepView, result: StepResult) -> dict[str, float]:
        return {}

    def learn(self, s: StepView) -> None:
        """After the step: update state kept across steps."""


class DapoPolicy(Policy):
    """DAPO: GRPO's groups; refill batches until `target` groups are mixed, then keep the first `target` of those."""

    settings_type = DapoSettings
    refills = True

    def prompts_wanted(self, s: StepView) -> int:
        st = self.settings
        if np.any(s.state != FINISHED):
            return 0
        if s.mixed().sum() >= s.target:
            return 0
        cap = st.max_num_gen_batches
        if cap > 0 and s.gen_batches >= cap:
            if st.on_cap == "error":
                raise DapoCapExceeded(
                    f"{s.gen_batches} generation batches gave {int(s.mixed().sum())} mixed groups "
                    f"of the {s.target} needed (max_num_gen_batches={cap})"
                )
            return 0
        return st.gen_batch_size or s.target

    def select(self, s: StepView, valid: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mixed = s.mixed()
        return valid, mixed & (np.cumsum(mixed) <= s.target)

    def metrics(self, s: StepView, result: StepResult) -> dict[str, float]:
        return dapo_metrics(result, initial_prompts=s.target, gen_batches=s.gen_batches)


class SeqPolicy(Policy):
    """Reinforce-Ada-Seq: rounds of `round_size` until the exit rule holds or `max_rounds` ran, then a
    downsampled group of n against the whole pool's mean."""

    settings_type = SeqSettings

    def need(self, s: StepView, slots: np.ndarray) -> np.ndarray:
        st = self.settings
        open_ = (s.exit_round[slots] == 0) & (s.batches[slots] < st.max_rounds)
        return np.where(open_, st.round_size, 0)

    def after_batch(self, s: StepView, slots: np.ndarray) -> None:
        met = exit_met(self.settings, s.npos[slots], s.count[slots]) & (s.exit_round[slots] == 0)
        s.exit_round[slots[met]] = s.batches[slots[met]]

    def select(self, s: StepView, valid: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        st = self.settings
        kept = select_group(positive, valid, st.n, st.downsample, s.rng)
        included = ~s.failed
        if st.unresolved == "drop":
            included &= s.exit_round > 0
        return kept, included

    def advantage(
        self, s: StepView, slot: np.ndarray, reward: np.ndarray, pool_mean: np.ndarray, pool_std: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        st = self.settings
        std = pool_std[slot] if st.global_std_norm else None
        return global_baseline_advantage(reward, pool_mean[slot], std, st.epsilon), pool_mean

    def metrics(self, s: StepView, result: StepResult) -> dict[str, float]:
        return seq_metrics(result)


class EstPolicy(Policy):
    """Reinforce-Ada-Est: a budget of n_avg per prompt allocated by an estimated pass rate kept across steps,
    residual-weighted advantages against the pool mean (or, as released, 1/p_hat shares and r - pool share)."""

    settings_type = EstSettings
    keeps_estimator = True

    def start(
        self, prompt_ids: Sequence[Hashable], estimator: BetaBernoulliEstimator | None
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        st = self.settings
        if estimator is None:
            raise ValueError("est needs a BetaBernoulliEstimator that persists across steps")
        p_hat = estimator.p_hat(list(prompt_ids))
        budget = st.n_avg * len(prompt_ids)
        if st.allocation == "inverse":
            quota = inverse_allocation(p_hat, budget)
        else:
            quota = allocate(p_hat, budget, st.n_min, st.n_max)
        weight = residual_weights(p_hat, st.w_max) if st.est_advantage == "weighted" else np.ones(len(prompt_ids))
        return quota, weight, p_hat

    def advantage(
        self, s: StepView, slot: np.ndarray, reward: np.ndarray, pool_mean: np.ndarray, pool_std: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        st = self.settings
        if st.est_advantage == "released":
            pool_mean = released_est_baseline(s.npos, s.count)  # what the verl estimator subtracts too
            return reward - pool_mean[slot], pool_mean
        std = pool_std[slot] if st.global_std_norm else None
        advantage = global_baseline_advantage(reward, pool_mean[slot], std, st.epsilon)
        return advantage * s.weight[slot], pool_mean

    def metrics(self, s: StepView, result: StepResult) -> dict[str, float]:
        return est_metrics(result, s.p_hat)

    def learn(self, s: StepView) -> None:
        if s.estimator is None:
            return
        ok = ~s.failed
        ids = [i for i, good in zip(s.prompt_ids, ok, strict=True) if good]
        s.estimator.update(ids, s.npos[ok], s.count[ok])


POLICIES: dict[str, type[Policy]] = {"uniform": Policy, "dapo": DapoPolicy, "seq": SeqPolicy, "est": EstPolicy}


def policy_for(spec: SamplerSpec) -> Policy:
    """The policy a spec's method family runs."""
    return POLICIES[spec.kind](spec)
