"""Intervals over seeds: the Student t interval of a mean and of paired differences.

Why the t interval and not a bootstrap: a cell of the grid has few seeds (3 in the paper's protocol, 1 in
the CPU miniature). The t interval mean ± t_{0.975, n-1} · s/√n (s the sample standard deviation, ddof=1)
is exact when the seed-to-seed noise is normal and widens honestly as n shrinks (t_{0.975,2} = 4.30, not
the normal 1.96); a bootstrap over 3 values resamples only 10 distinct multisets, so its percentiles are
degenerate and too narrow. One seed gives no estimate of the spread, so no interval at all (NaN), never a
fake one; no seed gives no mean either.

Paired differences: two methods trained on the same backbone, prompt set and seed see the same data order,
so d_s = x_{method,s} - x_{reference,s} over the seeds both have removes the seed's shared luck, and the
t interval of the d_s is the interval of the difference.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import numpy as np

__all__ = [
    "LEVEL",
    "Interval",
    "Stability",
    "paired_differences",
    "paired_interval",
    "repeat_probability",
    "seeds_to_exclude",
    "stability",
    "t_interval",
    "t_quantile",
]

LEVEL = 0.95


class Interval(NamedTuple):
    """A mean over `n` values and its two-sided interval; low/high are NaN when n < 2, mean NaN when n == 0."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))


def t_quantile(df: int, level: float = LEVEL) -> float:
    """The two-sided Student t critical value t_{(1+level)/2, df} (scipy is a dependency of the project)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    from scipy.stats import t  # imported here: only interval code pays for scipy.stats

    return float(t.ppf((1 + level) / 2, df))


def t_interval(values: Iterable[float], level: float = LEVEL) -> Interval:
    """mean ± t_{(1+level)/2, n-1} · s/√n over the finite values (NaN values are runs that did not measure)."""
    array = np.asarray(list(values), dtype=float)
    array = array[np.isfinite(array)]
    n = int(array.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(array.mean())
    if n == 1:
        return Interval(mean, math.nan, math.nan, 1)
    half = t_quantile(n - 1, level) * float(array.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def paired_differences(values: Mapping[object, float], reference: Mapping[object, float]) -> np.ndarray:
    """d_s = values[s] - reference[s] for the seeds s where both are finite, in seed order."""
    common = [s for s in values if s in reference and math.isfinite(values[s]) and math.isfinite(reference[s])]
    return np.array([values[s] - reference[s] for s in sorted(common)], dtype=float)


def paired_interval(
    values: Mapping[object, float], reference: Mapping[object, float], level: float = LEVEL
) -> Interval:
    """The t interval of the paired differences; n is the number of seeds both have."""
    return t_interval(paired_differences(values, reference), level)


# ------------------------------------------------------------------------------------------ how firm a verdict is
#
# With 3 seeds, leaving one out leaves a t interval on 2 values (t_{0.975,1} = 12.7): it contains 0 for
# almost any data, so "survives leaving out a seed" as an interval would brand every verdict fragile and say
# nothing. The report gives three figures instead, each about a different way a verdict could be luck:
# - whether one seed carries the sign: the mean of the other n-1 seeds keeps the sign with any one left out;
# - how often a fresh set of n seeds would give the same verdict, if the measured mean and spread were the
#   truth: the power of the t test at the measured effect, P(T > t_crit) + P(T < -t_crit) on the right side,
#   T noncentral t with n-1 degrees of freedom and noncentrality mean / (s / sqrt(n)). A verdict whose
#   interval just clears 0 repeats about half the time; one far from 0, nearly always;
# - how many seeds an interval needs to clear 0 at the measured mean and spread (t_{n-1} s / sqrt(n) < |mean|).


class Stability(NamedTuple):
    sign_kept: bool  # the mean of every n-1 seeds has the sign of the full mean
    flips_without: tuple[int, ...]  # positions (in seed order) whose leaving out flips the sign
    repeat: float  # probability that n fresh seeds give an interval excluding 0 on the measured side
    seeds_to_exclude: int | None  # smallest n whose interval clears 0 at the measured mean and spread
    spread: float  # s, the seed-to-seed standard deviation of the values (ddof=1)


def seeds_to_exclude(mean: float, spread: float, level: float = LEVEL, most: int = 1000) -> int | None:
    """The smallest n >= 2 with t_{(1+level)/2, n-1} * spread / sqrt(n) < |mean|; None past `most` seeds
    (or for a mean of 0)."""
    if not math.isfinite(mean) or mean == 0 or not math.isfinite(spread):
        return None
    if spread == 0:
        return 2
    for n in range(2, most + 1):
        if t_quantile(n - 1, level) * spread / math.sqrt(n) < abs(mean):
            return n
    return None


def repeat_probability(mean: float, spread: float, n: int, level: float = LEVEL) -> float:
    """P(a t interval over n fresh values excludes 0 on the side of `mean`), the values normal with this mean
    and standard deviation: the noncentral t's upper tail past t_crit. NaN for n < 2."""
    if n < 2 or not (math.isfinite(mean) and math.isfinite(spread)) or spread <= 0:
        return math.nan
    from scipy.stats import nct

    crit = t_quantile(n - 1, level)
    noncentrality = abs(mean) / (spread / math.sqrt(n))
    return float(nct.sf(crit, n - 1, noncentrality))


def stability(values: Iterable[float], level: float = LEVEL) -> Stability | None:
    """How firm the interval of `values` is (the three figures above); None below 3 finite values."""
    array = np.asarray(list(values), dtype=float)
    array = array[np.isfinite(array)]
    n = int(array.size)
    if n < 3:
        return None
    mean, spread = float(array.mean()), float(array.std(ddof=1))
    sign = np.sign(mean)
    left_out = [(float(array.sum()) - float(x)) / (n - 1) for x in array]
    flips = tuple(i for i, m in enumerate(left_out) if np.sign(m) != sign or m == 0)
    return Stability(
        sign_kept=not flips,
        flips_without=flips,
        repeat=repeat_probability(mean, spread, n, level),
        seeds_to_exclude=seeds_to_exclude(mean, spread, level),
        spread=spread,
    )
