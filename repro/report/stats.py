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

__all__ = ["LEVEL", "Interval", "paired_differences", "paired_interval", "t_interval", "t_quantile"]

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
