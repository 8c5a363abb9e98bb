"""One training step's sampling as a state machine that any driver can run.

A driver (verl rollout manager, CPU trainer, simulator) asks which prompts need how many more
responses, generates and scores them, and reports the rewards back; the machine decides exits and,
at the end, the update group, baseline and weight of every prompt. Synchronous drivers call `plan()`
once per round after every reward of the previous round is in; streaming drivers call `request(slot)`
as soon as one prompt's batch is scored. The per-prompt process is the same either way, so the pools
have the same distribution and only the scheduling differs.

Each prompt of the step occupies a *slot*; rewards are kept in a [slots, pool cap] array in arrival
order, so a response is identified by (slot, index) and a driver keeps its own list per slot.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from repro.sampling.advantage import group_stats
from repro.sampling.early_exit import first_returned, meeting_prefixes, order_preserving_exit
from repro.sampling.estimator import BetaBernoulliEstimator
from repro.sampling.metrics import step_metrics
from repro.sampling.policies import FINISHED, OUTSTANDING, WAITING, DapoCapExceeded, policy_for
from repro.sampling.result import StepResult
from repro.sampling.spec import SamplerSpec

__all__ = ["FINISHED", "OUTSTANDING", "WAITING", "BatchEnd", "DapoCapExceeded", "StepResult", "StepSampler"]


@dataclass(frozen=True)
class BatchEnd:
    """How a prompt's outstanding batch ended (`StepSampler.returned`), as positions in that batch's request
    order: the responses that join the pool, in pool order; those still in flight, which the driver cancels;
    and those that returned but are not kept (past the kept prefix), whose tokens were generated for nothing."""

    kept: np.ndarray
    cancelled: np.ndarray
    dropped: np.ndarray

    @property
    def cut(self) -> bool:
        return bool(self.cancelled.size or self.dropped.size)


class StepSampler:
    """The sampling state of one step for every method of the grid (see METHODS.md); the method's own
    decisions are its policy's (`repro.sampling.policies`)."""

    def __init__(
        self,
        spec: SamplerSpec,
        prompt_ids: Sequence[Hashable],
        *,
        step: int = 0,
        rng: np.random.Generator | int | None = None,
        estimator: BetaBernoulliEstimator | None = None,
    ) -> None:
        """`rng` overrides the default stream, which is derived from (spec.seed, step) so that every step of
        a run makes different but reproducible choices, and a resumed run repeats them exactly."""
        if len(prompt_ids) == 0:
            raise ValueError("a step needs at least one prompt")
        self.spec = spec
        self.policy = policy_for(spec)
        if isinstance(rng, np.random.Generator):
            self.rng = rng
        else:
            self.rng = np.random.default_rng([spec.seed, step] if rng is None else rng)
        self.estimator = estimator
        self.target = len(prompt_ids)
        cap = self._cap = spec.pool_cap_for(len(prompt_ids))
        self._ids: list[Hashable] = []
        self.rewards = np.zeros((0, cap))
        self.count = np.zeros(0, dtype=np.int64)
        self.npos = np.zeros(0, dtype=np.int64)
        self._outstanding = np.zeros(0, dtype=np.int64)
        self.state = np.zeros(0, dtype=np.int8)
        self.batches = np.zeros(0, dtype=np.int64)
        self.exit_round = np.zeros(0, dtype=np.int64)
        self._first_request = np.zeros(0, dtype=np.int64)
        self.quota = np.zeros(0, dtype=np.int64)
        self._failed = np.zeros(0, dtype=bool)
        self._back = np.zeros((0, cap), dtype=bool)  # responses of the outstanding batch returned, request order
        self.cancelled = 0  # responses cancelled in flight by the early exit
        self.dropped = 0  # responses returned past the kept prefix
        self.gen_batches = 0
        self._finalized = False
        quota, weight, self.p_hat = self.policy.start(self, prompt_ids)
        self.weight = np.ones(0)
        self._append(prompt_ids, quota)
        if weight is not None:
            self.weight = weight

    # ---- slots ---------------------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return len(self._ids)

    @property
    def prompt_ids(self) -> list[Hashable]:
        return list(self._ids)

    def _append(self, ids: Sequence[Hashable], quota: np.ndarray) -> np.ndarray:
        k = len(ids)
        start = len(self._ids)
        self._ids.extend(ids)
        fresh = np.zeros((k, self._cap))  # [prompts, cap] can be large (Knapsack, Est: n x prompts): no copy
        self.rewards = np.concatenate([self.rewards, fresh]) if len(self.rewards) else fresh
        zeros = np.zeros(k, dtype=np.int64)
        self.count = np.concatenate([self.count, zeros])
        self.npos = np.concatenate([self.npos, zeros])
        self._outstanding = np.concatenate([self._outstanding, zeros])
        self.state = np.concatenate([self.state, np.full(k, WAITING, dtype=np.int8)])
        self.batches = np.concatenate([self.batches, zeros])
        self.exit_round = np.concatenate([self.exit_round, zeros])
        self._first_request = np.concatenate([self._first_request, zeros])
        self.quota = np.concatenate([self.quota, np.asarray(quota, dtype=np.int64)])
        self._failed = np.concatenate([self._failed, np.zeros(k, dtype=bool)])
        self._back = np.concatenate([self._back, np.zeros((k, self._cap), dtype=bool)])
        self.weight = np.concatenate([self.weight, np.ones(k)])
        self._gen_start = start
        return np.arange(start, start + k)

    def prompts_wanted(self) -> int:
        """DAPO only: how many fresh prompts to draw now (a refill generation batch), else 0."""
        return self.policy.prompts_wanted(self)

    def add_prompts(self, prompt_ids: Sequence[Hashable]) -> np.ndarray:
        """Add a refill batch (DAPO); returns the new slots."""
        if self.prompts_wanted() <= 0:
            raise RuntimeError("no prompts are wanted now; call prompts_wanted() first")
        return self._append(prompt_ids, self.policy.refill_quota(self, prompt_ids))

    # ---- requests ------------------------------------------------------------------------------
    def _need(self, slots: np.ndarray) -> np.ndarray:
        return self.policy.need(self, slots)

    def _issue(self, slots: np.ndarray) -> np.ndarray:
        need = self._need(slots)
        self._outstanding[slots] = need
        self.state[slots] = np.where(need > 0, OUTSTANDING, FINISHED)  # a first request of 0: a skipped prompt
        first = self.batches[slots] == 0
        self._first_request[slots[first]] = need[first]
        return need

    def plan(self) -> tuple[np.ndarray, np.ndarray]:
        """Every prompt ready for its next batch: (slots, responses to generate for each)."""
        slots = np.flatnonzero(self.state == WAITING)
        need = self._issue(slots)
        return slots[need > 0], need[need > 0]

    def request(self, slot: int) -> int:
        """Streaming: the next batch size for one prompt if it is ready, else 0."""
        if self.state[slot] != WAITING:
            return 0
        return int(self._issue(np.array([slot]))[0])

    # ---- observations --------------------------------------------------------------------------
    def observe(self, slot: int, rewards: Sequence[float] | np.ndarray) -> None:
        """Scores of some (or all) of a prompt's outstanding responses, in arrival order (not under the early exit,
        which needs their places in the request order: `returned`)."""
        if self.spec.early_exit != "off":
            raise RuntimeError("the early exit ends batches by what has returned: report responses with returned()")
        rewards = np.atleast_1d(np.asarray(rewards, dtype=float))
        k = rewards.size
        if k > self._outstanding[slot]:
            raise ValueError(f"slot {slot}: {k} rewards for {self._outstanding[slot]} outstanding responses")
        c = self.count[slot]
        self.rewards[slot, c : c + k] = rewards
        self.npos[slot] += int((rewards > self.spec.positive_threshold).sum())
        self.count[slot] = c + k
        self._outstanding[slot] -= k
        if self._outstanding[slot] == 0:
            self._complete(np.array([slot]))

    def returned(
        self, slot: int, positions: int | Sequence[int] | np.ndarray, rewards: float | Sequence[float] | np.ndarray
    ) -> BatchEnd | None:
        """Responses of a prompt's outstanding batch are back, all in the same instant: `positions` are their
        places in the batch's request order. The batch ends (a `BatchEnd`) when every response has returned, or,
        with the spec's early exit, when the rule holds: on the request-order prefix that has returned (`order`,
        unbiased) or on whatever has returned (`first-returned`, biased: for comparison only). The pool then
        holds the kept responses; those back in the same instant past the kept prefix are dropped, not cancelled."""
        positions, rewards = np.atleast_1d(np.asarray(positions, dtype=np.int64)), np.atleast_1d(rewards)
        base, need = int(self.count[slot]), int(self._outstanding[slot])
        back = self._back[slot, base : base + need]
        fresh = np.unique(positions).size == positions.size and not ((positions < 0) | (positions >= need)).any()
        if positions.size != rewards.size or not fresh or back[positions].any():
            raise ValueError(f"slot {slot}: positions {positions.tolist()} are not outstanding responses of its batch")
        self.rewards[slot, base + positions] = rewards
        back[positions] = True
        mode, everything = self.spec.early_exit, np.arange(need)
        keep: int | None = None  # responses of the batch kept, when the exit decides before the batch is back
        if mode == "order":
            ready = self._back[slot, : base + need] | (np.arange(base + need) < base)  # the pool so far is back
            decided = order_preserving_exit(self.spec, self.rewards[slot, : base + need], ready)
            keep = None if decided is None else decided - base
        elif mode == "first-returned":
            arrived = np.flatnonzero(back)
            pool = np.concatenate([self.rewards[slot, :base], self.rewards[slot, base + arrived]])
            keep = None if first_returned(self.spec, pool) is None else arrived.size
        if keep is None and not back.all():
            return None
        if keep is None:
            end = BatchEnd(everything, everything[:0], everything[:0])
        elif mode == "order":
            end = BatchEnd(everything[:keep], everything[keep:][~back[keep:]], everything[keep:][back[keep:]])
        else:
            end = BatchEnd(np.flatnonzero(back), np.flatnonzero(~back), everything[:0])
        row = self.rewards[slot, base : base + need]
        row[: end.kept.size] = row[end.kept]  # the pool: the kept responses, in order (ascending positions)
        row[end.kept.size :] = 0.0
        back[:] = False
        self.cancelled += int(end.cancelled.size)
        self.dropped += int(end.dropped.size)
        self.count[slot] = base + end.kept.size
        self.npos[slot] = int((self.rewards[slot, : self.count[slot]] > self.spec.positive_threshold).sum())
        self._outstanding[slot] = 0
        self._complete(np.array([slot]))
        return end

    def returned_all(self, slots: np.ndarray, rewards: np.ndarray) -> None:
        """`returned` for every response of these slots' batches back in one instant (a synchronous round with no
        clock: the simulator), vectorised: under the order-preserving exit each slot keeps the shortest
        request-order prefix of its pool that meets the rule, else its whole batch; under first-returned everything
        back, the whole batch (nothing returned first)."""
        slots, rewards = np.asarray(slots, dtype=np.int64), np.asarray(rewards, dtype=float)
        need, base = self._outstanding[slots], self.count[slots]
        if np.any(self._back[slots]) or rewards.shape[0] != slots.size or rewards.shape[1] < need.max(initial=0):
            raise ValueError("returned_all takes whole outstanding batches, none of them partly reported")
        width = int((base + need).max(initial=0))
        cols = np.arange(width)
        fill = (cols[None, :] >= base[:, None]) & (cols[None, :] < (base + need)[:, None])
        rows = self.rewards[slots, :width].copy()
        at_row, at_col = np.nonzero(fill)  # row by row, ascending: each slot's batch in request order
        rows[at_row, at_col] = rewards[at_row, at_col - base[at_row]]
        prefix = meeting_prefixes(self.spec, rows, base + need) if self.spec.early_exit == "order" else 0 * need
        count = np.where(prefix > 0, prefix, base + need)
        keep = cols[None, :] < count[:, None]
        self.rewards[slots, :width] = np.where(keep, rows, 0.0)
        self.dropped += int((base + need - count).sum())
        self.count[slots] = count
        self.npos[slots] = ((rows > self.spec.positive_threshold) & keep).sum(axis=1)
        self._outstanding[slots] = 0
        self._complete(slots)

    def observe_many(self, slots: np.ndarray, rewards: np.ndarray) -> None:
        """Vectorised: complete the outstanding batch of each slot; row i holds slot i's rewards. Not under the
        early exit, which needs each response's place in the request order (`returned`)."""
        if self.spec.early_exit != "off":
            raise RuntimeError("the early exit ends batches by what has returned: report responses with returned()")
        slots = np.asarray(slots, dtype=np.int64)
        rewards = np.asarray(rewards, dtype=float)
        need = self._outstanding[slots]
        if slots.size == 0:
            return
        if rewards.ndim != 2 or rewards.shape[0] != slots.size or rewards.shape[1] < need.max():
            raise ValueError("rewards must be [len(slots), >= outstanding] for a batch completion")
        cols = np.arange(rewards.shape[1])
        fill = cols[None, :] < need[:, None]
        rows = np.broadcast_to(slots[:, None], fill.shape)[fill]
        where = (self.count[slots][:, None] + cols[None, :])[fill]
        values = rewards[fill]
        self.rewards[rows, where] = values
        self.npos[slots] += ((rewards > self.spec.positive_threshold) & fill).sum(axis=1)
        self.count[slots] += need
        self._outstanding[slots] = 0
        self._complete(slots)

    def _complete(self, slots: np.ndarray) -> None:
        self.batches[slots] += 1
        self.policy.after_batch(self, slots)
        need = self._need(slots)
        self.state[slots] = np.where(need > 0, WAITING, FINISHED)
        self._count_gen_batch()

    def _count_gen_batch(self) -> None:
        if self.policy.refills and np.all(self.state[self._gen_start :] == FINISHED):
            self.gen_batches += 1

    def fail(self, slot: int) -> None:
        """Give up on a prompt whose outstanding batch could not be generated (the driver's retries ran out).

        It is finished without an update group; its responses so far stay in the pool counts (they were
        drawn), but it is left out of the update, of Seq's exit statistics and of Est's estimator update,
        and it is not a mixed group for DAPO. Counted as `sampler/failed_prompts`.
        """
        if self.state[slot] != OUTSTANDING:
            raise RuntimeError(f"slot {slot}: only a prompt with an outstanding batch can fail")
        self._failed[slot] = True
        self._outstanding[slot] = 0
        self.state[slot] = FINISHED
        self._count_gen_batch()

    @property
    def failed(self) -> np.ndarray:
        """[slots] prompts given up with `fail`."""
        return self._failed.copy()

    def done(self) -> bool:
        return bool(np.all(self.state == FINISHED)) and self.prompts_wanted() == 0

    # ---- the update ----------------------------------------------------------------------------
    def mixed(self) -> np.ndarray:
        """Groups whose rewards are not all equal (DAPO's criterion: std > 0)."""
        valid = np.arange(self._cap)[None, :] < self.count[:, None]
        hi = np.where(valid, self.rewards, -np.inf).max(axis=1, initial=-np.inf)
        lo = np.where(valid, self.rewards, np.inf).min(axis=1, initial=np.inf)
        return (self.count > 1) & (hi > lo) & ~self._failed

    def finalize(self) -> StepResult:
        """Select update groups, compute baselines/advantages/metrics; Est's estimator learns here."""
        if self._finalized:
            raise RuntimeError("finalize() was already called for this step")
        if not self.done():
            raise RuntimeError("the step is not done: some prompts still need responses")
        self._finalized = True
        spec = self.spec
        slots_n = self.num_slots
        # no cell at or past the largest pool is valid: the work below stops there (same cells, same order), as
        # the pool cap can be far above it (Knapsack's and Est's n x prompts)
        width = int(self.count.max(initial=0))
        valid = np.zeros((slots_n, self._cap), dtype=bool)
        valid[:, :width] = np.arange(width)[None, :] < self.count[:, None]
        positive = np.zeros_like(valid)
        positive[:, :width] = valid[:, :width] & (self.rewards[:, :width] > spec.positive_threshold)
        kept, included = self.policy.select(self, valid, positive)
        included = included & ~self._failed
        kept = kept & included[:, None]
        slot, index = np.nonzero(kept if kept[:, width:].any() else kept[:, :width])
        reward = self.rewards[slot, index]
        drawn = np.minimum(self.count, self._cap)
        pool_slot = np.repeat(np.arange(slots_n), drawn)  # np.nonzero(valid)[0]
        _, pool_mean, pool_std = group_stats(pool_slot, self.rewards[:, :width][valid[:, :width]], slots_n)
        scored = self.policy.advantage(self, slot, reward, pool_mean, pool_std)
        advantage, pool_mean = scored.advantage, scored.pool_mean
        result = StepResult(
            spec=spec,
            prompt_ids=list(self._ids),
            pool_size=self.count.copy(),
            pool_positives=self.npos.copy(),
            pool_mean=pool_mean,
            weight=self.weight.copy(),
            included=included,
            rounds=self.batches.copy(),
            exit_round=self.exit_round.copy(),
            failed=self._failed.copy(),
            slot=slot,
            index=index,
            reward=reward,
            advantage=advantage,
            baseline=scored.baseline,
            scale=scored.scale,
        )
        firsts = np.minimum(self._first_request, self.count)  # each prompt's first-request responses drawn
        if spec.early_exit != "off":  # a pool cut by a rule is a stopped sample; its first n are always kept
            firsts = np.minimum(firsts, spec.n)
        span = pairwise_span(self._cap, int(firsts.max(initial=0)))
        first = np.arange(span)[None, :] < firsts[:, None]
        first_total = np.where(first, self.rewards[:, :span], 0.0).sum(axis=1)  # the whole row's sum, bit for bit
        result.metrics = step_metrics(
            result,
            first_request=self._first_request if spec.early_exit == "off" else np.minimum(self._first_request, drawn),
            first_draw_reward=first_total / np.maximum(np.clip(firsts, 0, self._cap), 1),
            initial_prompts=self.target,
        )
        result.metrics.update(self.policy.metrics(self, result))
        if spec.early_exit != "off":
            result.metrics["exit/responses_cancelled"] = float(self.cancelled)
            result.metrics["exit/responses_dropped"] = float(self.dropped)
        self.policy.learn(self)
        return result


def pairwise_span(length: int, width: int) -> int:
    """How many leading columns of a [rows, length] float array numpy's row sums need when only the first
    `width` can be nonzero: the same bits as summing whole rows.

    numpy sums a row pairwise: a row longer than 128 is split at half its length (rounded down to a multiple
    of 8) and the halves are summed the same way, then added. A right half of zeros sums to +0.0, and adding
    +0.0 changes nothing (a -0.0 turns +0.0, but the reduction starts from +0.0, which does the same), so
    the row's sum is its leading half's for as long as that half holds every column below `width`.
    tests/test_step_sums.py holds this against whole-row sums."""
    while length > 128:
        half = length // 2
        half -= half % 8
        if half < width:
            break
        length = half
    return length
