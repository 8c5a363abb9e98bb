"""Closed forms of the sampling statistics, to print beside the Monte-Carlo ones.

All are exact given the prompts' true pass rates: the only randomness they integrate out is the
Bernoulli rewards. Seq is an absorbing Markov chain on the positive count after each round, so a
forward pass over rounds (binomial convolution, exits removed) gives every statistic at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.sampling.rules import exit_met, required_negatives, required_positives
from repro.sampling.spec import SamplerSpec


@dataclass(frozen=True)
class SeqExact:
    """Per prompt: exit probability per round, pool-size distribution and the unresolved split."""

    exit_by_round: np.ndarray  # [prompts, rounds] P(exit rule first met after round t)
    pool_size_pmf: np.ndarray  # [prompts, rounds] P(pool = M*t)
    mixed: np.ndarray  # [prompts] P(final pool holds both classes)
    unresolved: np.ndarray  # [prompts] P(rule never met)
    missing_pos: np.ndarray  # [prompts]
    missing_neg: np.ndarray  # [prompts]
    round_size: int

    @property
    def sizes(self) -> np.ndarray:
        return self.round_size * np.arange(1, self.pool_size_pmf.shape[1] + 1)

    @property
    def mean_draws(self) -> np.ndarray:
        return self.pool_size_pmf @ self.sizes


def seq_exact(p: np.ndarray, spec: SamplerSpec) -> SeqExact:
    from scipy.stats import binom  # here, not at the top: every `repro` process (and spawned child) imports this module

    p = np.asarray(p, dtype=float)
    m, rounds = spec.round_size, spec.max_rounds
    width = m * rounds + 1
    pmf = binom.pmf(np.arange(m + 1)[None, :], m, p[:, None])  # [prompts, m+1]
    active = np.zeros((p.size, width))
    active[:, 0] = 1.0
    exits = np.zeros((p.size, rounds))
    mixed = np.zeros(p.size)
    j = np.arange(width)
    for t in range(1, rounds + 1):
        nxt = np.zeros_like(active)
        for k in range(m + 1):
            nxt[:, k:] += active[:, : width - k] * pmf[:, k : k + 1]
        total = m * t
        met = exit_met(spec, j, np.full(width, total)) & (j <= total)
        both = (j > 0) & (j < total)
        exits[:, t - 1] = nxt[:, met].sum(axis=1)
        mixed += nxt[:, met & both].sum(axis=1)
        nxt[:, met] = 0.0
        active = nxt
    cap = m * rounds
    unresolved = active.sum(axis=1)
    mixed += active[:, (j > 0) & (j < cap)].sum(axis=1)
    missing_pos = active[:, j < required_positives(spec)].sum(axis=1)
    missing_neg = active[:, (j >= required_positives(spec)) & (cap - j < required_negatives(spec))].sum(axis=1)
    size_pmf = exits.copy()
    size_pmf[:, -1] += unresolved
    return SeqExact(exits, size_pmf, mixed, unresolved, missing_pos, missing_neg, m)


def uniform_mixed(p: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """P(a group of n has both classes) = 1 - p^n - (1-p)^n."""
    p = np.asarray(p, dtype=float)
    return 1.0 - p**n - (1.0 - p) ** n


def dapo_expected_batches(q: float, batch: int, gen_batch: int, cap: int) -> float:
    """E[generation batches] until `batch` mixed groups, each drawn prompt mixed with prob q.

    P(more than b batches needed) = P(Binomial(b * gen_batch, q) < batch); summing that survival
    function over b < cap gives the (capped) expectation.
    """
    from scipy.stats import binom

    limit = cap if cap > 0 else 10_000
    total = 0.0
    for b in range(limit):
        survive = 1.0 if b == 0 else float(binom.cdf(batch - 1, b * gen_batch, q))
        total += survive
        if survive < 1e-15:
            break
    return total


def sequential_mean_draws(p: np.ndarray, spec: SamplerSpec) -> np.ndarray:
    """Per prompt, the responses a one-at-a-time sampler keeps under Seq's rule (from n on), capped as the rounds
    are (`repro.sampling.early_exit`): E[T] = sum over m < cap of P(T > m), and T > m iff the first m responses
    do not meet the rule (the rule only counts, and counts only grow, so no shorter prefix met it either)."""
    from scipy.stats import binom

    p = np.asarray(p, dtype=float)
    cap = spec.round_size * spec.max_rounds
    need_pos = spec.k_pos if spec.exit_rule == "pos" else spec.n // 2
    need_neg = 0 if spec.exit_rule == "pos" else spec.n // 2
    total = np.zeros(p.size)
    for m in range(cap):
        if m < spec.n:
            total += 1.0
            continue
        k = np.arange(m + 1)
        met = (k >= need_pos) & (m - k >= need_neg)
        total += binom.pmf(k[None, :], m, p[:, None])[:, ~met].sum(axis=1)
    return total
