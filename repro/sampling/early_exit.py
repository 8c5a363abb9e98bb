"""Stopping a prompt's sampling the moment its exit rule holds, without choosing responses by their length
(issue 46): the order-preserving exit, and the first-returned exit it is compared with.

A Seq round requests `M` responses of every active prompt at once and waits for all of them, though a prompt's
first returns may already meet its exit rule; the rest are paid for, and being the longest they are what the
round waits for. Cutting by completion order (keep whatever returned first) keeps the short responses, and with
math rewards short and correct are correlated, so the update group stops being a sample of the policy.

The order-preserving exit: number a prompt's responses in the order they were requested; evaluate the rule on
every prefix of that order whose responses have all returned, shortest first; at the first prefix where it
holds, keep that prefix, cancel every response after it (in flight) and start none. The rule only counts
positives and negatives, so it holds on a prefix at most once it holds on a shorter one: the kept prefix is the
shortest prefix of the request order that meets the rule, which is exactly what a sampler drawing one response
at a time would keep, whatever the responses' lengths and whenever they return. A prefix counts from n
responses on (the update group's size): the paper's first round of M >= n responses guarantees every pool can
fill a group, and a Seq-pos prefix of one positive could not (Seq-balance's rule needs n anyway).
`first_returned` is the biased variant, for the measurement only: the rule on the responses returned so far, in
completion order.

Pure functions on reward arrays (numpy, no framework), for every driver; the enumeration in
tests/test_early_exit.py checks the distributions exactly.
"""

from __future__ import annotations

import numpy as np

from repro.sampling.rules import exit_met
from repro.sampling.settings import SeqSettings
from repro.sampling.spec import SamplerSpec


def meeting_prefixes(spec: SamplerSpec | SeqSettings, rewards: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row of `rewards` ([prompts, width], request order; row i's first lengths[i] count): the length of the
    shortest prefix of at least n responses that meets the exit rule, 0 where none does."""
    rewards = np.atleast_2d(rewards)
    if rewards.shape[1] == 0:
        return np.zeros(rewards.shape[0], dtype=np.int64)
    positives = np.cumsum(rewards > spec.positive_threshold, axis=1)  # positive as the core counts it
    sizes = np.broadcast_to(np.arange(1, rewards.shape[1] + 1), rewards.shape)
    met = exit_met(spec, positives, sizes) & (sizes >= spec.n) & (sizes <= np.asarray(lengths)[:, None])
    return np.where(met.any(axis=1), met.argmax(axis=1) + 1, 0)


def shortest_meeting_prefix(spec: SamplerSpec | SeqSettings, rewards: np.ndarray) -> int | None:
    """The length of the shortest prefix of `rewards` (one prompt's, in request order) of at least n responses
    that meets the exit rule, or None when no prefix does: what a one-at-a-time sampler keeps."""
    rewards = np.asarray(rewards, dtype=float)
    keep = int(meeting_prefixes(spec, rewards[None, :], [rewards.size])[0])
    return keep or None


def order_preserving_exit(spec: SamplerSpec | SeqSettings, rewards: np.ndarray, returned: np.ndarray) -> int | None:
    """The prefix to keep once the rule holds on a prefix of the request order whose responses have all
    returned (`returned`: a mask in request order), or None while undecided: every response after it is
    cancelled. Responses returned beyond the first gap do not count yet, however many they are."""
    returned = np.asarray(returned, dtype=bool)
    gap = np.flatnonzero(~returned)
    ready = int(gap[0]) if gap.size else returned.size
    return shortest_meeting_prefix(spec, np.asarray(rewards)[:ready])


def first_returned(spec: SamplerSpec | SeqSettings, rewards_by_return: np.ndarray) -> int | None:
    """The biased variant (for comparison only): how many of the responses, in the order they returned, are
    kept when the rule is checked on whatever has returned; None while undecided."""
    return shortest_meeting_prefix(spec, rewards_by_return)


class BiasTally:
    """What each rule keeps of the same returns, over a step's batches that the rule ended: the order-preserving
    prefix (what the run keeps) and the first-returned set (what the biased cut would have kept at its own,
    earlier or equal, moment). Logged as sums (`metrics`), so runs and steps pool by adding."""

    RULES = ("kept", "first_returned")

    def __init__(self) -> None:
        self.sums = {rule: np.zeros(3) for rule in self.RULES}  # responses, reward sum, length sum
        self.batches = 0

    def add(self, rule: str, rewards: np.ndarray, lengths: np.ndarray) -> None:
        self.sums[rule] += (len(rewards), float(np.sum(rewards)), float(np.sum(lengths)))

    def metrics(self) -> dict[str, float]:
        out = {"exit/decided_batches": float(self.batches)}
        for rule, (count, reward, length) in self.sums.items():
            out |= {
                f"exit/{rule}_responses": count,
                f"exit/{rule}_reward_sum": reward,
                f"exit/{rule}_length_sum": length,
            }
        return out
