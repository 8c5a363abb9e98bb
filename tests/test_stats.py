"""The t interval over seeds against hand computations and published t quantiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from repro.report import stats

# two-sided 95% critical values t_{0.975, df}, as printed in standard t tables
PUBLISHED = {1: 12.706204736, 2: 4.302652730, 4: 2.776445105, 9: 2.262157163, 29: 2.045229642}


@pytest.mark.parametrize(("df", "value"), sorted(PUBLISHED.items()))
def test_t_quantile_matches_published_values(df: int, value: float) -> None:
    assert stats.t_quantile(df) == pytest.approx(value, abs=1e-8)


def test_t_quantile_rejects_zero_degrees_of_freedom() -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        stats.t_quantile(0)


def test_three_values_by_hand() -> None:
    # [1, 2, 3]: mean 2, s = 1, half width 4.302652729911275 / sqrt(3) = 2.484138...
    interval = stats.t_interval([1.0, 2.0, 3.0])
    assert interval.n == 3 and interval.mean == pytest.approx(2.0, abs=1e-12)
    assert interval.low == pytest.approx(-0.4841, abs=1e-4)
    assert interval.high == pytest.approx(4.4841, abs=1e-4)
    assert interval.high - interval.mean == pytest.approx(4.302652729911275 / math.sqrt(3), abs=1e-9)
    assert interval.has_interval


def test_two_values_by_hand() -> None:
    # [44, 46]: mean 45, s = sqrt(2), half width 12.706204736 * sqrt(2) / sqrt(2) = 12.706204736
    interval = stats.t_interval([44.0, 46.0])
    assert interval.mean == pytest.approx(45.0, abs=1e-12)
    assert (interval.low, interval.high) == pytest.approx((45.0 - 12.706204736, 45.0 + 12.706204736), abs=1e-8)


def test_one_value_has_no_interval_and_none_has_no_mean() -> None:
    one = stats.t_interval([48.0])
    assert one.mean == 48.0 and one.n == 1 and math.isnan(one.low) and math.isnan(one.high)
    assert not one.has_interval
    none = stats.t_interval([])
    assert none.n == 0 and math.isnan(none.mean) and not none.has_interval
    # a NaN (a run that did not measure) is dropped, not counted
    assert stats.t_interval([math.nan, 5.0]).n == 1


def test_identical_values_give_a_zero_width_interval() -> None:
    interval = stats.t_interval([3.0, 3.0, 3.0])
    assert (interval.low, interval.mean, interval.high) == (3.0, 3.0, 3.0)


def test_paired_differences_use_only_common_seeds_in_seed_order() -> None:
    method = {0: 48.0, 1: 50.0, 2: 47.0, 5: 99.0}
    reference = {2: 44.0, 0: 45.0, 1: 46.0, 3: 10.0}
    np.testing.assert_array_equal(stats.paired_differences(method, reference), [3.0, 4.0, 3.0])
    # d = [3, 4, 3]: mean 10/3, s = sqrt(1/3), half width 4.302652729911275 * sqrt(1/3) / sqrt(3) = 4.3026527 / 3
    interval = stats.paired_interval(method, reference)
    assert interval.n == 3 and interval.mean == pytest.approx(10 / 3, abs=1e-12)
    assert interval.high - interval.mean == pytest.approx(4.302652729911275 / 3, abs=1e-9)


def test_one_common_seed_gives_no_interval() -> None:
    interval = stats.paired_interval({0: 48.0, 1: 50.0}, {0: 44.0, 2: 40.0})
    assert interval.n == 1 and interval.mean == 4.0 and not interval.has_interval
    assert stats.paired_interval({0: 1.0}, {1: 2.0}).n == 0


# ------------------------------------------------------------------------------------------ how firm a verdict is


def test_seeds_to_exclude_against_the_t_table() -> None:
    # mean = spread: t_{0.975,n-1} / sqrt(n) < 1 first at n = 7 (t_5 = 2.5706 / 2.4495 = 1.049; t_6 = 2.4469 / 2.6458)
    assert stats.seeds_to_exclude(1.0, 1.0) == 7
    # mean = 2 spread: t_2 / sqrt(3) = 2.484 > 2; t_3 / 2 = 1.591 < 2 -> 4
    assert stats.seeds_to_exclude(-2.0, 1.0) == 4
    assert stats.seeds_to_exclude(0.0, 1.0) is None and stats.seeds_to_exclude(1e-4, 1.0, most=50) is None
    assert stats.seeds_to_exclude(1.0, 0.0) == 2


def test_repeat_probability_in_the_normal_limit_and_by_simulation() -> None:
    from scipy.stats import norm

    # many seeds: the t test is the z test, P = Phi(noncentrality - 1.96)
    n, spread = 40_000, 1.0
    for mean in (0.0098, 0.02, -0.015):
        z = abs(mean) * math.sqrt(n) / spread
        assert stats.repeat_probability(mean, spread, n) == pytest.approx(norm.cdf(z - 1.959964), abs=2e-3)
    # three seeds, by simulation: how often a t interval over 3 normal draws excludes 0 on the mean's side
    rng = np.random.default_rng(7)
    mean, spread, trials = 1.0, 0.6, 200_000
    draws = rng.normal(mean, spread, size=(trials, 3))
    low = draws.mean(axis=1) - 4.302653 * draws.std(axis=1, ddof=1) / math.sqrt(3)
    simulated = float(np.mean(low > 0))
    se = math.sqrt(simulated * (1 - simulated) / trials)
    assert stats.repeat_probability(mean, spread, 3) == pytest.approx(simulated, abs=4 * se)
    assert math.isnan(stats.repeat_probability(1.0, 1.0, 1))


def test_stability_leaves_each_seed_out_of_the_mean() -> None:
    firm = stats.stability([1.0, 2.0, 3.0])
    assert firm is not None and firm.sign_kept and firm.flips_without == () and firm.spread == pytest.approx(1.0)
    # [-4, 1, 1.5]: mean -0.5; leaving out -4 gives +1.25, the others -1.5 and -1.25
    shaky = stats.stability([-4.0, 1.0, 1.5])
    assert shaky is not None and not shaky.sign_kept and shaky.flips_without == (0,)
    assert stats.stability([1.0, 2.0]) is None and stats.stability([1.0, float("nan"), 2.0]) is None
