"""Knapsack RL's rollout allocation (Li et al. 2025, github liziniu/KnapsackRL at ca5d5f5), rule for rule.

The step's budget (`n` x prompts) is split across prompts by each one's pass-rate estimate p: prompts with
0 < p < 1 ("effective") get `min_n` and share the rest through an exact-fill knapsack that maximises
sum (1 - p^N - (1-p)^N) p (1-p)^2 over their counts N; p = 0 and p = 1 prompts get `negative_n` /
`positive_n`, prompts seen fewer than `min_buffer_length` times get `n`. Before the knapsack a "cost" check
caps its budget at what the effective prompts need for a 90% chance of both outcomes, and hands the excess
to the p = 0 (and unseen) prompts. The estimate p is the `PassRateBuffer`'s.

What the authors' code does is followed where it is defined, quirks included, because a bench compares
methods as published (each with its file:line in EU = verl/trainer/ppo/exploration_utils.py, DS =
verl/utils/dataset/rl_dataset.py):
- the knapsack scores an effective prompt left at `min_n` as 0, not as the value at N = min_n (EU:225-228);
- p is held in float32 (EU:70), the gains computed in float64 (the authors' pinned numpy<2 and numba paths);
- the fallback extras and the knapsack's leftover are not capped at `max_n` (EU:156-161, EU:403-412).
Where it is not defined (it fails its own budget assertion, EU:183), this module diverges, and says so:
- every prompt effective and the cost below the budget (the authors' `abundant // len([])` loses the excess,
  then the assertion fails): the excess stays with the knapsack, as with `allow_fallback` off;
- a budget other than `n` x prompts, and counts above `n`, are refused by `KnapsackSettings` (the paths where
  the authors' budget goes negative or is reset to `n` each, EU:131-133, EU:284-286).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from repro.atomic import write_text
from repro.sampling.knapsack_dp import exact_fill
from repro.sampling.settings import KnapsackSettings


@dataclass(frozen=True)
class Allocation:
    budget: np.ndarray  # [prompts] rollouts each
    fallback: bool  # the cost check handed budget to the p = 0 / unseen prompts
    fallback_effective_ratio: float  # the knapsack's share of what was left after the floors (1.0 without)


def _cost(p: float, settings: KnapsackSettings) -> float:
    if settings.cost == "probability":  # the N with max(p, 1-p)^N = 1 - alpha (EU:82-83)
        return math.log(1 - settings.alpha) / math.log(max(p, 1 - p))
    return 1 / (p * (1 - p)) - 1  # EU:84-85


def _spread(budget: np.ndarray, where: Sequence[int], amount: int) -> None:
    """`amount` in equal shares over `where`, in order, the first `amount mod len` one more (EU:120-126)."""
    share, extra = divmod(amount, len(where))
    for rank, i in enumerate(where):
        budget[i] += share + (1 if rank < extra else 0)


def allocate(states: np.ndarray, settings: KnapsackSettings) -> Allocation:
    """Rollouts per prompt from each prompt's [valid, p, count] (the buffer's `state`); sums to n x prompts."""
    states = np.asarray(states, dtype=float).reshape(-1, 3)
    prompts = len(states)
    budget = np.zeros(prompts, dtype=np.int64)
    rates = np.zeros(prompts, dtype=np.float32)  # unseen prompts stay 0 here, so they count as p = 0 below
    costs = np.zeros(prompts, dtype=np.float32)
    effective: list[int] = []
    for i, (valid, p, _count) in enumerate(states):
        if valid != 1:
            budget[i] = settings.n
            continue
        if 0 < p < 1:
            costs[i] = _cost(float(p), settings)
            budget[i] = settings.min_n
            effective.append(i)
        else:
            budget[i] = settings.negative_n if p == 0 else settings.positive_n
        rates[i] = p
    left = settings.n * prompts - int(budget.sum())
    fallback, ratio = False, 1.0
    if left > 0 and not effective:  # EU:113-136
        zeros = np.flatnonzero(rates == 0)
        if len(zeros):
            _spread(budget, zeros, left)
        else:  # every prompt solved: n each (EU:131-133)
            budget[:] = settings.n
        return Allocation(budget, fallback, ratio)
    need = sum(int(min(settings.max_n, costs[i])) for i in effective)  # each term floored (EU:139-141)
    candidates = np.flatnonzero(rates == 0)
    if not len(candidates):
        candidates = np.array([i for i in range(prompts) if i not in set(effective)], dtype=np.int64)
    # divergence: with no prompt to take the excess the authors' code fails its budget assertion (module doc)
    if need < left and settings.allow_fallback and len(candidates):
        fallback, ratio = True, need / left
        _spread(budget, candidates, left - need)
        left = need
    budget += knapsack(rates, effective, settings.min_n, settings.max_n - settings.min_n, left)
    return Allocation(budget, fallback, ratio)


def gains(p: np.float32, min_n: int, extra: int) -> np.ndarray:
    """[extra + 1] the knapsack's value of giving an effective prompt k = 0..extra more rollouts: the chance
    that N = min_n + k draws hold both outcomes, times p (1-p)^2; k = 0 scores 0 (EU:225-228, EU:240-243)."""
    return _gains(float(p), min_n, extra).copy()


@functools.lru_cache(maxsize=4096)
def _gains(q: float, min_n: int, extra: int) -> np.ndarray:
    """Cached: estimates take few values (fractions of a window), and each row costs `extra` float powers,
    Python's own (numpy's vector power may differ in the last bit, and the allocation with it)."""
    out = np.zeros(extra + 1)
    for k in range(1, extra + 1):
        n = k + min_n
        out[k] = (1 - q**n - (1 - q) ** n) * q * ((1 - q) ** 2)
    out.flags.writeable = False
    return out


def knapsack(rates: np.ndarray, effective: Sequence[int], min_n: int, extra: int, budget: int) -> np.ndarray:
    """Extra rollouts per prompt: the exact-fill dynamic programme of EU:257-414, ties as it breaks them
    (the first option met, k = 0 first, wins; the backtrack runs from the last item), the budget it cannot
    place (more than `extra` each) spread evenly over the effective prompts in order. The programme runs in
    `knapsack_dp.exact_fill`, which skips the cells that cannot change its answer."""
    out = np.zeros(len(rates), dtype=np.int64)
    if budget <= 0:
        return out
    if not effective:
        _spread(out, range(len(rates)), budget)
        return out
    top = min(extra, budget)
    gain = np.stack([_gains(float(rates[idx]), min_n, extra)[: top + 1] for idx in effective])
    counts, reached = exact_fill(gain, budget)
    for idx, k in zip(effective, counts, strict=True):
        out[idx] += k
    if budget - reached > 0:
        _spread(out, effective, budget - reached)
    return out


def _share(outcomes: list[int]) -> float:
    """np.mean of 0/1 outcomes without its per-call cost: numpy sums them exactly in float64 and divides once,
    as the exact integer sum over the count does (both correctly rounded; counts far below 2**53)."""
    return sum(outcomes) / len(outcomes) if outcomes else math.nan  # np.mean([]) is nan too


@dataclass
class PassRateBuffer:
    """Each prompt's rollout outcomes across steps and the estimate the allocation reads (DS:129-240).

    The estimate is this step's pass rate when the step drew at least `reward_buffer_length` rollouts of the
    prompt, else the pass rate of its newest `reward_buffer_length` outcomes across steps (the authors'
    `epoch_estimation` and `robust_epoch_estimation`, both on in their script). Outcomes are 0/1: a response
    counts as solved when its reward passes the run's positive threshold (the authors' rewards are +-1).
    """

    settings: KnapsackSettings = field(default_factory=KnapsackSettings)
    outcomes: dict[Hashable, list[list[int]]] = field(default_factory=dict)
    estimate: dict[Hashable, float] = field(default_factory=dict)

    def state(self, prompt: Hashable) -> tuple[int, float, int]:
        """[valid, p, count]: valid once `min_buffer_length` outcomes were seen (DS:229-240)."""
        count = sum(len(step) for step in self.outcomes.get(prompt, ()))
        if prompt not in self.outcomes:
            return (1 if self.settings.min_buffer_length == 0 else 0, 0.0, 0)
        return (1 if count >= self.settings.min_buffer_length else 0, self.estimate[prompt], count)

    def states(self, prompts: Sequence[Hashable]) -> np.ndarray:
        return np.array([self.state(p) for p in prompts], dtype=float).reshape(-1, 3)

    def update(self, prompt: Hashable, solved: Sequence[int | bool]) -> None:
        step = [int(bool(s)) for s in solved]
        history = self.outcomes.setdefault(prompt, [])
        history.append(step)
        window = self.settings.reward_buffer_length
        if len(step) >= window:
            self.estimate[prompt] = _share(step)
            return
        newest: list[int] = []
        for earlier in reversed(history):  # newest step first, each step's outcomes newest first
            newest.extend(reversed(earlier))
            if len(newest) >= window:
                break
        self.estimate[prompt] = _share(newest[:window])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Atomic JSON write, as the Est estimator's: a crash mid-save leaves the previous state."""
        write_text(path, json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | os.PathLike[str], settings: KnapsackSettings | None = None) -> PassRateBuffer:
        with open(path) as handle:
            return cls.from_dict(json.load(handle), settings)

    def to_dict(self) -> dict:
        """For a checkpoint: the outcomes, from which `from_dict` replays the estimates (as DS:242-257)."""
        return {"outcomes": [[str(k), v] for k, v in self.outcomes.items()]}

    @classmethod
    def from_dict(cls, data: dict, settings: KnapsackSettings | None = None) -> PassRateBuffer:
        buffer = cls(settings or KnapsackSettings())
        for key, steps in data["outcomes"]:
            for step in steps:
                buffer.update(key, step)
        return buffer
