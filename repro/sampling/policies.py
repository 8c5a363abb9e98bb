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

import os
from collections.abc import Hashable, Sequence
from typing import ClassVar, NamedTuple, Protocol

import numpy as np

from repro.sampling import greso, knapsack, pods
from repro.sampling.advantage import global_baseline_advantage, grpo_advantage, grpo_affine, released_est_baseline
from repro.sampling.allocation import allocate, inverse_allocation, residual_weights
from repro.sampling.downsample import select_group
from repro.sampling.estimator import BetaBernoulliEstimator, make_estimator
from repro.sampling.metrics import dapo_metrics, est_metrics, seq_metrics
from repro.sampling.result import StepResult
from repro.sampling.rules import exit_met
from repro.sampling.settings import (
    DapoSettings,
    EstSettings,
    GresoSettings,
    KnapsackSettings,
    PodsSettings,
    SeqSettings,
    Settings,
    UniformSettings,
)
from repro.sampling.spec import SamplerSpec

WAITING, OUTSTANDING, FINISHED = 0, 1, 2  # a slot's state: ready for its next batch, awaiting one, done


class Memory(Protocol):
    """State a method keeps across steps (Est's estimator, Knapsack RL's pass-rate buffer): drivers create it
    with `Policy.new_memory`, save it beside each checkpoint and load it with `Policy.load_memory`."""

    def save(self, path: str | os.PathLike[str]) -> None: ...


class StepView(Protocol):
    """What a policy reads of the step's sampler (`repro.sampling.step.StepSampler`); the one array it writes
    is `exit_round` (Seq's exit)."""

    spec: SamplerSpec
    rng: np.random.Generator
    estimator: Memory | None
    rewards: np.ndarray  # [slots, pool cap] in arrival order; the first count[slot] of a row are scored
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


class Scored(NamedTuple):
    """A step's advantages: per kept response, the baseline per prompt the result reports as its pool mean, and
    for the affine families the per-prompt (baseline, scale) with A = (r - baseline) * scale."""

    advantage: np.ndarray
    pool_mean: np.ndarray
    baseline: np.ndarray | None = None
    scale: np.ndarray | None = None


class DapoCapExceeded(RuntimeError):
    """DAPO hit its generation-batch cap before collecting enough mixed groups (verl raises too)."""


class Policy:
    """GRPO (`uniform`): n responses per prompt, all of them in the update, group-normalised advantages."""

    settings_type: ClassVar[type[Settings]] = UniformSettings
    refills: ClassVar[bool] = False  # draws fresh prompts within a step
    # verl's advantage estimator on the verl path: its own "grpo" over each kept group, or the plugin's
    # "reinforce_ada", A = (r - baseline) * scale from the core's numbers (repro.verl_plugin.advantage)
    verl_advantage: ClassVar[str] = "grpo"

    def __init__(self, spec: SamplerSpec) -> None:
        self.spec = spec
        self.settings = self.settings_type.of(spec)

    def new_memory(self) -> Memory | None:
        """A fresh state kept across steps, or None when the method keeps none."""
        return None

    @property
    def keeps_estimator(self) -> bool:
        """Whether drivers create, save and restore state across steps for it: it defines `new_memory`."""
        return type(self).new_memory is not Policy.new_memory

    def load_memory(self, path: str | os.PathLike[str]) -> Memory | None:
        return None

    def start(self, s: StepView, prompt_ids: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(first request per prompt, weight per prompt or None for 1, p_hat or an empty array), before the
        step's first slot exists."""
        return np.full(len(prompt_ids), self.settings.n), None, np.ones(0)

    def refill_quota(self, s: StepView, prompt_ids: Sequence[Hashable]) -> np.ndarray:
        """The first request of each prompt a refill adds (`prompts_wanted`)."""
        return np.full(len(prompt_ids), self.settings.n)

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
    ) -> Scored:
        """Advantages of the kept responses (see `Scored`)."""
        st = self.settings
        return Scored(grpo_advantage(slot, reward, s.num_slots, st.norm_adv_by_std, st.epsilon), pool_mean)

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
    verl_advantage = "reinforce_ada"

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
    ) -> Scored:
        st = self.settings
        std = pool_std[slot] if st.global_std_norm else None
        return Scored(global_baseline_advantage(reward, pool_mean[slot], std, st.epsilon), pool_mean)

    def metrics(self, s: StepView, result: StepResult) -> dict[str, float]:
        return seq_metrics(result)


class EstPolicy(Policy):
    """Reinforce-Ada-Est: a budget of n_avg per prompt allocated by an estimated pass rate kept across steps,
    residual-weighted advantages against the pool mean (or, as released, 1/p_hat shares and r - pool share)."""

    settings_type = EstSettings
    verl_advantage = "reinforce_ada"

    def new_memory(self) -> BetaBernoulliEstimator:
        return make_estimator(self.settings)

    def load_memory(self, path: str | os.PathLike[str]) -> BetaBernoulliEstimator:
        return BetaBernoulliEstimator.load(path)

    def start(self, s: StepView, prompt_ids: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        st = self.settings
        if not isinstance(s.estimator, BetaBernoulliEstimator):
            raise ValueError("est needs a BetaBernoulliEstimator that persists across steps")
        p_hat = s.estimator.p_hat(list(prompt_ids))
        budget = st.n_avg * len(prompt_ids)
        if st.allocation == "inverse":
            quota = inverse_allocation(p_hat, budget)
        else:
            quota = allocate(p_hat, budget, st.n_min, st.n_max)
        weight = residual_weights(p_hat, st.w_max) if st.est_advantage == "weighted" else np.ones(len(prompt_ids))
        return quota, weight, p_hat

    def advantage(
        self, s: StepView, slot: np.ndarray, reward: np.ndarray, pool_mean: np.ndarray, pool_std: np.ndarray
    ) -> Scored:
        st = self.settings
        if st.est_advantage == "released":
            pool_mean = released_est_baseline(s.npos, s.count)  # what the verl estimator subtracts too
            return Scored(reward - pool_mean[slot], pool_mean)
        std = pool_std[slot] if st.global_std_norm else None
        advantage = global_baseline_advantage(reward, pool_mean[slot], std, st.epsilon)
        return Scored(advantage * s.weight[slot], pool_mean)

    def metrics(self, s: StepView, result: StepResult) -> dict[str, float]:
        return est_metrics(result, s.p_hat)

    def learn(self, s: StepView) -> None:
        if s.estimator is None:
            return
        ok = ~s.failed
        ids = [i for i, good in zip(s.prompt_ids, ok, strict=True) if good]
        s.estimator.update(ids, s.npos[ok], s.count[ok])


class PodsPolicy(Policy):
    """PODS: `generate` responses per prompt, the update on the n with the largest reward variance, advantages
    over those n alone (`repro.sampling.pods`, the authors' single-GPU rule)."""

    settings_type = PodsSettings
    verl_advantage = "reinforce_ada"

    def start(self, s: StepView, prompt_ids: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        return np.full(len(prompt_ids), self.settings.generate), None, np.ones(0)

    def select(self, s: StepView, valid: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        kept = np.zeros_like(valid)
        included = ~s.failed & (s.count >= self.settings.n)
        slots = np.flatnonzero(included)
        for size in np.unique(s.count[slots]):  # every prompt at once per pool size (`generate` for all, as a rule)
            same = slots[s.count[slots] == size]
            chosen = pods.max_variance_subsets(s.rewards[same, :size], self.settings.n)
            kept[same[:, None], chosen] = True
        return kept, included

    def advantage(
        self, s: StepView, slot: np.ndarray, reward: np.ndarray, pool_mean: np.ndarray, pool_std: np.ndarray
    ) -> Scored:
        baseline, scale = np.zeros(s.num_slots), np.ones(s.num_slots)
        groups, sizes = np.unique(slot, return_counts=True)
        if sizes.size and (sizes == sizes[0]).all():  # `slot` is sorted: one row per prompt, numpy's 1-d bits
            kept = reward.reshape(groups.size, sizes[0])
            baseline[groups] = kept.mean(axis=1)
            scale[groups] = 1.0 / (kept.std(axis=1, ddof=1) + self.settings.epsilon)
        else:
            for k in groups:
                kept = reward[slot == k]
                baseline[k], scale[k] = kept.mean(), 1.0 / (kept.std(ddof=1) + self.settings.epsilon)
        return Scored((reward - baseline[slot]) * scale[slot], pool_mean, baseline, scale)


class KnapsackPolicy(Policy):
    """Knapsack RL: the step's budget (n x prompts) allocated by a knapsack over each prompt's pass rate from
    its buffer of outcomes across steps; the update on every response, GRPO's group-normalised advantages."""

    settings_type = KnapsackSettings
    verl_advantage = "reinforce_ada"

    def new_memory(self) -> knapsack.PassRateBuffer:
        return knapsack.PassRateBuffer(self.settings)

    def load_memory(self, path: str | os.PathLike[str]) -> knapsack.PassRateBuffer:
        return knapsack.PassRateBuffer.load(path, self.settings)

    def start(self, s: StepView, prompt_ids: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        if not isinstance(s.estimator, knapsack.PassRateBuffer):
            raise ValueError("knapsack needs a PassRateBuffer that persists across steps")
        self.states = s.estimator.states([str(i) for i in prompt_ids])
        self.allocation = knapsack.allocate(self.states, self.settings)
        return self.allocation.budget, None, np.ones(0)

    def advantage(
        self, s: StepView, slot: np.ndarray, reward: np.ndarray, pool_mean: np.ndarray, pool_std: np.ndarray
    ) -> Scored:
        baseline, scale = grpo_affine(slot, reward, s.num_slots, self.settings.epsilon)
        return Scored((reward - baseline[slot]) * scale[slot], pool_mean, baseline, scale)

    def metrics(self, s: StepView, result: StepResult) -> dict[str, float]:
        valid = self.states[:, 0] == 1
        rate = self.states[:, 1]
        budget = self.allocation.budget
        return {
            "knapsack/fallback": float(self.allocation.fallback),
            "knapsack/effective_prompts": float(np.sum(valid & (rate > 0) & (rate < 1))),
            "knapsack/unseen_prompts": float(np.sum(~valid)),
            "knapsack/alloc_min": float(budget.min()),
            "knapsack/alloc_max": float(budget.max()),
        }

    def learn(self, s: StepView) -> None:
        if not isinstance(s.estimator, knapsack.PassRateBuffer):
            return
        count = s.count.tolist()
        width = max(count, default=0)
        solved = (s.rewards[:, :width] > self.settings.positive_threshold).tolist()  # one conversion, not one a slot
        for slot, (prompt, failed) in enumerate(zip(s.prompt_ids, s.failed.tolist(), strict=True)):
            if not failed:
                s.estimator.update(str(prompt), solved[slot][: count[slot]])


class GresoPolicy(Policy):
    """GRESO: before any rollout, skip prompts whose history predicts a zero-variance group; roll out the rest
    in rounds DAPO-style (zero-variance groups dropped, refills sized from the last round) until `target`
    groups are mixed; steer the skip factors toward a zero-variance share (`repro.sampling.greso`)."""

    settings_type = GresoSettings
    refills = True

    def new_memory(self) -> greso.GresoMemory:
        return greso.GresoMemory(self.settings.p_easy, self.settings.p_hard)

    def load_memory(self, path: str | os.PathLike[str]) -> greso.GresoMemory:
        return greso.GresoMemory.load(path)

    def start(self, s: StepView, prompt_ids: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        if not isinstance(s.estimator, greso.GresoMemory):
            raise ValueError("greso needs a GresoMemory that persists across steps")
        self.memory = s.estimator
        self.log: list[int] = []  # EASY, HARD or KEPT per slot
        self.round_size = self.settings.round_sizes(len(prompt_ids))[0]
        self.round_start, self.rounds, self.last = 0, 1, False
        self.factors = (self.memory.p_easy, self.memory.p_hard)  # as this step's skips read them
        return self._decide(s, prompt_ids), None, np.ones(0)

    def _decide(self, s: StepView, prompt_ids: Sequence[Hashable]) -> np.ndarray:
        histories = [self.memory.history(str(i)) for i in prompt_ids]
        log = greso.skip(histories, *self.factors, lambda: float(s.rng.random()))
        self.log.extend(log)
        return np.where(np.array(log, dtype=np.int64) == greso.KEPT, self.settings.n, 0)

    def _kept_in_round(self) -> int:
        return self.log[self.round_start :].count(greso.KEPT)

    def _next_round(self, s: StepView) -> tuple[int, bool] | None:
        """The next round's (size, last), or None when the step is done: enough mixed groups, the last round
        ran, or the round cap."""
        mixed = s.mixed()
        if mixed.sum() >= s.target or self.last or self.rounds >= self.settings.max_rounds:
            return None
        rolled = (np.array(self.log) == greso.KEPT) & ~s.failed
        rolled[: self.round_start] = False  # the last round's groups only
        share = 1.0 - float(mixed[rolled].sum()) / max(int(rolled.sum()), 1)
        missing = (s.target - int(mixed.sum())) * self.settings.n  # responses (RT:1155)
        return greso.refill(missing, share, self.settings, s.target)

    def prompts_wanted(self, s: StepView) -> int:
        kept = self._kept_in_round()
        if kept < self.round_size:  # the round fills up with prompts that are not skipped
            return self.round_size - kept
        if np.any(s.state != FINISHED):
            return 0
        following = self._next_round(s)
        return 0 if following is None else following[0]

    def refill_quota(self, s: StepView, prompt_ids: Sequence[Hashable]) -> np.ndarray:
        if self._kept_in_round() >= self.round_size:  # these prompts begin the next round
            following = self._next_round(s)
            assert following is not None, "prompts_wanted() asked for none"
            (self.round_size, self.last), self.round_start = following, s.num_slots
            self.rounds += 1
        return self._decide(s, prompt_ids)

    def select(self, s: StepView, valid: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mixed = s.mixed()
        return valid, mixed & (np.cumsum(mixed) <= s.target)

    def advantage(
        self, s: StepView, slot: np.ndarray, reward: np.ndarray, pool_mean: np.ndarray, pool_std: np.ndarray
    ) -> Scored:
        baseline, scale = grpo_affine(slot, reward, s.num_slots, self.settings.epsilon)  # adv_estimator=grpo
        return Scored((reward - baseline[slot]) * scale[slot], pool_mean, baseline, scale)

    def metrics(self, s: StepView, result: StepResult) -> dict[str, float]:
        log = np.array(self.log)
        return {
            "greso/prompts_drawn": float(log.size),
            "greso/skipped_easy": float(np.sum(log == greso.EASY)),
            "greso/skipped_hard": float(np.sum(log == greso.HARD)),
            "greso/rounds": float(self.rounds),
            "greso/p_easy": self.factors[0],
            "greso/p_hard": self.factors[1],
            "greso/kept_prompts": float(result.included.sum()),
        }

    def learn(self, s: StepView) -> None:
        """Every rolled-out group's mean joins its prompt's history; then the factors move by the step's
        shares of all-solved and all-format-only groups, from the second epoch on (the module's reading)."""
        failed, ids, count = s.failed.tolist(), s.prompt_ids, s.count  # the properties copy: read them once
        rolled = [slot for slot, entry in enumerate(self.log) if entry == greso.KEPT and not failed[slot]]
        keys = [str(ids[slot]) for slot in rolled]
        seen_before = any(self.memory.history(key) for key in keys)
        for key, mean in zip(keys, _row_means(s.rewards, count, rolled), strict=True):
            self.memory.histories.setdefault(key, []).append(mean)
        if seen_before and rolled:
            easy, hard = greso.pool_shares(s.rewards[rolled], count[rolled])
            self.memory.p_easy, self.memory.p_hard = greso.update_factors(*self.factors, easy, hard, self.settings)


def _row_means(rewards: np.ndarray, count: np.ndarray, slots: Sequence[int]) -> list[float]:
    """float(np.mean(rewards[slot, :count[slot]])) for each slot, computed per pool size as one [slots, size]
    array: numpy averages along a contiguous last axis as it averages a 1-d array (same sums, same bits;
    tests/test_pods_batch.py holds it)."""
    out = [0.0] * len(slots)
    rows = np.asarray(slots, dtype=np.int64)
    sizes = count[rows] if rows.size else np.zeros(0, dtype=np.int64)
    for size in np.unique(sizes):
        where = np.flatnonzero(sizes == size)
        if size == 0:  # np.mean of nothing: nan, with numpy's warning
            means = [float(np.mean(rewards[rows[j], :0])) for j in where]
        else:
            means = rewards[rows[where], :size].mean(axis=1).tolist()
        for j, mean in zip(where.tolist(), means, strict=True):
            out[j] = mean
    return out


POLICIES: dict[str, type[Policy]] = {
    "uniform": Policy,
    "dapo": DapoPolicy,
    "seq": SeqPolicy,
    "est": EstPolicy,
    "pods": PodsPolicy,
    "knapsack": KnapsackPolicy,
    "greso": GresoPolicy,
}


def policy_for(spec: SamplerSpec) -> Policy:
    """The policy a spec's method family runs."""
    return POLICIES[spec.kind](spec)
