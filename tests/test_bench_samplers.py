"""The other adaptive samplers' core rules (repro/sampling/knapsack.py, pods.py, greso.py) against their
authors' code.

Every expected value below was produced by running the authors' own functions, unchanged, from a snapshot of
their repository outside this project (KnapsackRL ca5d5f5, PODS 187f43b, GRESO b277843; the inputs chosen to
reach each branch, their fallbacks and their failures), and is written here as data with its source. Where
the authors' code fails its own invariants, the module's chosen behaviour is tested beside the authors'
recorded failure. The rules are also checked against exact enumeration where one exists.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from repro.sampling import greso, knapsack, pods
from repro.sampling.settings import PodsSettings

# KnapsackRL ca5d5f5, sampling_budget_by_knapsack (verl/trainer/ppo/exploration_utils.py:20-196), run from a snapshot
KNAPSACK = [  # (name, [valid, p, count] per prompt, settings, budget the authors' code returned)
    (
        "mixed_no_fallback",
        [
            [1, 0.5, 16],
            [1, 0.1, 16],
            [1, 0.9, 16],
            [1, 0.0, 16],
            [1, 1.0, 16],
            [0, 0.0, 0],
            [1, 0.25, 16],
            [1, 0.75, 16],
        ],
        {},
        [7, 20, 3, 2, 2, 8, 13, 9],
        False,
    ),
    (
        "mixed_no_fallback_expectation_cost",
        [
            [1, 0.5, 16],
            [1, 0.1, 16],
            [1, 0.9, 16],
            [1, 0.0, 16],
            [1, 1.0, 16],
            [0, 0.0, 0],
            [1, 0.25, 16],
            [1, 0.75, 16],
        ],
        {"cost": "expectation"},
        [6, 14, 3, 8, 2, 13, 11, 7],
        True,
    ),
    (
        "large_budget_hits_max_128",
        [[1, 0.99, 16], [1, 0.98, 16], [1, 0.97, 16], [1, 0.5, 16]],
        {"n": 64},
        [15, 110, 113, 18],
        False,
    ),
    (
        "hits_max_128_and_fallback_over_max",
        [[1, 0.01, 16], [1, 0.01, 16], [1, 0.02, 16], [1, 1.0, 16]],
        {"n": 128},
        [124, 123, 128, 137],
        True,
    ),
    (
        "fallback_to_zero_and_unseen",
        [[1, 0.5, 16], [1, 0.5, 16], [1, 0.0, 16], [1, 0.0, 16], [1, 1.0, 16], [1, 1.0, 16], [1, 1.0, 16], [0, 0.0, 0]],
        {},
        [5, 5, 14, 14, 2, 2, 2, 20],
        True,
    ),
    ("fallback_to_p1_no_zeros", [[1, 0.5, 16], [1, 0.5, 16], [1, 1.0, 16], [1, 1.0, 16]], {}, [5, 5, 11, 11], True),
    (
        "fallback_exceeds_max_n",
        [[1, 0.3, 16], [1, 0.6, 16], [1, 0.05, 16], [1, 0.95, 16], [1, 1.0, 16]],
        {"max_n": 6},
        [8, 8, 7, 7, 10],
        True,
    ),
    (
        "no_effective_zeros_and_unseen",
        [[1, 0.0, 16], [1, 0.0, 16], [1, 1.0, 16], [1, 1.0, 16], [0, 0.0, 0]],
        {},
        [10, 10, 2, 2, 16],
        False,
    ),
    ("no_effective_all_solved_default_budget", [[1, 1.0, 16], [1, 1.0, 16], [1, 1.0, 16]], {}, [8, 8, 8], False),
    ("all_unseen_first_step", [[0, 0.0, 0], [0, 0.0, 0], [0, 0.0, 0], [0, 0.0, 0]], {}, [8, 8, 8, 8], False),
]
# PODS 187f43b, MaxVarGRPOTrainer._prepare_inputs (trainer/maxvargrpo_trainer.py:515-533), run from a snapshot
PODS = [  # (name, rewards, m, indices kept, advantages of the kept in that order)
    (
        "bin_n16_m4_P0_all_zero",
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        4,
        [0, 1, 2, 3],
        [0.0, 0.0, 0.0, 0.0],
    ),
    (
        "bin_n16_m4_P16_all_one",
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        4,
        [0, 1, 2, 3],
        [0.0, 0.0, 0.0, 0.0],
    ),
    (
        "bin_n16_m4_P1",
        [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        4,
        [5, 0, 1, 2],
        [1.4997, -0.4999, -0.4999, -0.4999],
    ),
    (
        "bin_n16_m4_P3",
        [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        4,
        [2, 7, 14, 15],
        [0.865875, 0.865875, -0.865875, -0.865875],
    ),
    (
        "bin_n16_m4_P8_alternating",
        [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
        4,
        [0, 2, 13, 15],
        [0.865875, 0.865875, -0.865875, -0.865875],
    ),
    (
        "bin_n16_m4_P13",
        [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0],
        4,
        [0, 1, 9, 14],
        [0.865875, 0.865875, -0.865875, -0.865875],
    ),
    (
        "bin_n16_m8_P5",
        [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        8,
        [0, 4, 6, 10, 11, 12, 13, 14],
        [0.935239, 0.935239, 0.935239, 0.935239, -0.935239, -0.935239, -0.935239, -0.935239],
    ),
    (
        "bin_n16_m16_P5_m_equals_n",
        [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        16,
        [0, 4, 6, 10, 15, 1, 2, 3, 5, 7, 8, 9, 11, 12, 13, 14],
        [
            1.435841,
            1.435841,
            1.435841,
            1.435841,
            1.435841,
            -0.652655,
            -0.652655,
            -0.652655,
            -0.652655,
            -0.652655,
            -0.652655,
            -0.652655,
            -0.652655,
            -0.652655,
            -0.652655,
            -0.652655,
        ],
    ),
    (
        "nonbin_n16_m4_gsm8k_style",
        [1.1, 0.1, 1.075, 0.0, 0.1, 1.1, -0.5, 0.05, 1.0, 0.1, 0.0, 1.1, 0.08, -0.5, 0.1, 1.09],
        4,
        [0, 5, 6, 13],
        [0.865932, 0.865932, -0.865932, -0.865932],
    ),
    (
        "nonbin_n16_m4_skewed_continuous",
        [0.9, 0.85, 0.8, 0.82, 0.88, 0.1, 0.95, 0.87, 0.83, 0.86, 0.84, 0.81, 0.89, 0.9, 0.8, 0.85],
        4,
        [6, 0, 13, 5],
        [0.580524, 0.458309, 0.458309, -1.497141],
    ),
    (
        "nonbin_n16_m5_odd_m",
        [3.0, 1.0, 2.0, 2.0, 0.5, 2.5, 1.5, 0.0, 2.0, 1.0, 3.0, 0.0, 1.0, 2.0, 0.5, 1.5],
        5,
        [0, 10, 14, 7, 11],
        [1.086021, 1.086021, -0.511069, -0.830486, -0.830486],
    ),
    (
        "bin_n8_m6_P4_n_lt_2m",
        [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0],
        6,
        [1, 2, 5, 3, 4, 7],
        [0.912704, 0.912704, 0.912704, -0.912704, -0.912704, -0.912704],
    ),
    (
        "bin_n8_m6_P1_n_lt_2m",
        [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        6,
        [3, 0, 1, 2, 4, 5],
        [2.040741, -0.408148, -0.408148, -0.408148, -0.408148, -0.408148],
    ),
    (
        "nonbin_n8_m6_n_lt_2m",
        [0.3, 0.9, 0.1, 0.7, 0.5, 0.2, 0.8, 0.6],
        6,
        [1, 6, 3, 0, 5, 2],
        [1.174096, 0.880572, 0.587048, -0.587048, -0.880572, -1.174096],
    ),
]


GRESO_P = (0.5, 0.5)
# GRESO b277843, DataProfiler.filter_examples_all_probabilistic (verl/trainer/ttis/presampling_selector.py:230-255)
# with torch.manual_seed(0): each prompt's group means, the uniform draws the authors' code consumed in order,
# and its skip log (0 skipped as all-solved, 1 skipped as unsolved, 2 kept); p_easy = p_hard = 0.5
GRESO_HISTORIES = [
    [1.0],
    [1.0, 1.0, 1.0],
    [0.1, 0.1],
    [0.5],
    [0.0, 0.0, 0.0, 0.0],
    [1.0, 0.1],
    [1.0] * 7,
    [0.625],
    [],
    [],
]
GRESO_SKIP_PROBABILITIES = [  # (easy, hard) as the code computed them; None: it returned before drawing
    (0.5, None), (0.875, None), (0.0, 0.75), (0.0, None), (0.0, 0.9375), (0.0, 0.5), (0.99, None), (0.0, None),
    (None, None), (None, None),
]  # fmt: skip
GRESO_DRAWS = [
    0.49625658988952637, 0.7682217955589294, 0.08847743272781372, 0.13203048706054688, 0.30742281675338745,
    0.6340786814689636, 0.4900934100151062, 0.8964447379112244, 0.455627977848053, 0.6323062777519226,
    0.3488934636116028,
]  # fmt: skip
GRESO_LOG = [0, 0, 1, 2, 1, 1, 0, 2, 2, 2]
# ray_trainer.py:1200-1219 stepped with the shares below (epoch, easy share, hard share) -> (p_easy, p_hard)
GRESO_FACTORS = [
    (0, 0.1953125, 0.3125, 0.5, 0.5),  # the first epoch does not move them
    (1, 0.1953125, 0.3125, 0.49, 0.49),
    (1, 0.15625, 0.1171875, 0.48, 0.5),
    (1, 0.0390625, 0.078125, 0.49, 0.51),
]
GRESO_BOUNDS = [  # from p_easy 0.065, p_hard 0.935: (easy share, hard share) -> (p_easy, p_hard)
    (0.390625, 0.390625, 0.055, 0.925), (0.390625, 0.390625, 0.05, 0.915), (0.390625, 0.390625, 0.05, 0.905),
]  # fmt: skip
# ray_trainer.py:1149-1162 (math_qwen_7b_dm_greso.sh: 384 prompts a round, 2048 responses wanted, n = 8):
# (responses still missing, the last round's zero-variance share as the code held it) -> (next round, last)
GRESO_REFILL = [(1280, 0.5, 384, False), (448, 0.5, 140, True), (768, 0.8999999761581421, 384, False)]


@pytest.mark.parametrize(("name", "states", "changes", "expected", "fallback"), KNAPSACK, ids=[c[0] for c in KNAPSACK])
def test_knapsack_allocates_as_the_authors_code(name, states, changes, expected, fallback) -> None:
    settings = knapsack.KnapsackSettings(**changes)
    got = knapsack.allocate(np.array(states, dtype=float), settings)
    assert got.budget.tolist() == expected
    assert got.fallback == fallback
    assert got.budget.sum() == settings.n * len(states)  # the step's budget, always


def test_the_knapsack_scores_a_prompt_left_at_its_floor_as_zero_as_the_authors_do() -> None:
    # 8 effective prompts with 5 rollouts beyond their floors of 2: the authors' solve_by_dp gave
    # [3, 3, 2, 3, 3, 2, 2, 3] (exploration_utils.py:257-414); the objective with k = 0 scored v(p, 2) would
    # give [3, 2, 2, 4, 2, 2, 2, 4] (enumeration below), so the quirk is kept, not fixed
    rates = np.array([0.5, 0.1, 0.9, 0.3, 0.7, 0.02, 0.98, 0.45], dtype=np.float32)
    extra = knapsack.knapsack(rates, list(range(8)), 2, 126, 5)
    assert (extra + 2).tolist() == [3, 3, 2, 3, 3, 2, 2, 3]

    def value(p: float, n: int) -> float:
        return (1 - p**n - (1 - p) ** n) * p * (1 - p) ** 2

    def total(ks: tuple[int, ...], zero_at_floor: bool) -> float:
        return sum(
            0.0 if (k == 0 and zero_at_floor) else value(float(p), 2 + k) for p, k in zip(rates, ks, strict=True)
        )

    splits = [ks for ks in itertools.product(range(6), repeat=8) if sum(ks) == 5]
    assert max(splits, key=lambda ks: total(ks, True)) == tuple(extra)
    assert [2 + k for k in max(splits, key=lambda ks: total(ks, False))] == [3, 2, 2, 4, 2, 2, 2, 4]


def test_knapsack_fills_the_budget_where_the_authors_code_fails_its_assertion() -> None:
    # every prompt effective and their cost (12) below what is left (24): the authors' code hands the excess
    # to no one and stops on "AssertionError: Budget mismatch: expected 32, got 20" (exploration_utils.py:183);
    # here the knapsack keeps it (the module's stated divergence)
    states = np.array([[1, 0.5, 16]] * 4, dtype=float)
    got = knapsack.allocate(states, knapsack.KnapsackSettings())
    assert got.budget.tolist() == [8, 8, 8, 8] and not got.fallback
    with pytest.raises(ValueError, match="max_n"):
        knapsack.KnapsackSettings(max_n=1)  # the authors' max_n=None default raises TypeError: a bound is required


def test_the_pass_rate_buffer_follows_the_authors_trace() -> None:
    # rl_dataset.py:129-240 with min_buffer_length 8, reward_buffer_length 16 (the script's): rewards +-1
    # there, solved/unsolved here; [valid, p, count] after each step as the authors' buffer returned it
    buffer = knapsack.PassRateBuffer()
    assert buffer.state("7") == (0, 0.0, 0)
    steps = [[1, 0, 0, 0, 1, 0, 0, 0], [1, 1], [1, 1, 1] + [0] * 13 + [1, 1, 1, 1], [0, 0, 0, 0]]
    expected = [(1, 0.25, 8), (1, 0.4, 10), (1, 0.35, 30), (1, 0.25, 34)]
    for step, state in zip(steps, expected, strict=True):
        buffer.update("7", step)
        assert buffer.state("7") == pytest.approx(state)
    again = knapsack.PassRateBuffer.from_dict(buffer.to_dict())
    assert again.state("7") == buffer.state("7")
    assert knapsack.PassRateBuffer(knapsack.KnapsackSettings(min_buffer_length=0)).state("3") == (1, 0.0, 0)


@pytest.mark.parametrize(("name", "rewards", "m", "indices", "adv"), PODS, ids=[c[0] for c in PODS])
def test_pods_keeps_what_the_authors_single_gpu_trainer_keeps(name, rewards, m, indices, adv) -> None:
    rewards = np.array(rewards)
    kept = pods.max_variance_subset(rewards, m)
    assert kept.tolist() == indices
    assert pods.advantages(rewards[kept]) == pytest.approx(adv, abs=2e-6)


def test_pods_on_64_responses_keeps_the_authors_rewards_whatever_order_equal_ones_sort_in() -> None:
    # n = 64, m = 16, 32 solved (the authors' main setting): their unstable torch.sort kept indices
    # [48, 54, 20, 22, 52, 24, 26, 50, 25, 27, 29, 31, 33, 35, 37, 39], 8 solved and 8 not
    rewards = np.array([1.0, 0.0] * 16 + [0.0, 1.0] * 16)
    kept = pods.max_variance_subset(rewards, 16)
    assert sorted(rewards[kept]) == [0.0] * 8 + [1.0] * 8 and len(set(kept.tolist())) == 16


@pytest.mark.parametrize(("n", "m"), [(6, 3), (8, 4), (8, 6), (10, 5)])
def test_pods_reaches_the_largest_variance_of_every_subset(n: int, m: int) -> None:
    rng = np.random.default_rng(n * 10 + m)
    for _ in range(20):
        rewards = rng.choice([0.0, 0.1, 0.5, 1.0, 1.1], size=n)
        best = max(np.var(rewards[list(c)], ddof=1) for c in itertools.combinations(range(n), m))
        kept = pods.max_variance_subset(rewards, m)
        assert len(set(kept.tolist())) == m
        assert np.var(rewards[kept], ddof=1) == pytest.approx(best, rel=1e-6)


def test_pods_never_keeps_a_response_twice_where_the_authors_multi_gpu_trainer_does() -> None:
    # n = 8 < 2m = 12: open-r1/src/open_r1/grpo_trainer.py:1106-1116 wrote through a view of the sorted indices
    # and kept [3, 7, 5, 2, 5, 2] (responses 5 and 2 twice); the single-GPU rule, followed here, keeps 6 distinct
    rewards = np.array([0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    kept = pods.max_variance_subset(rewards, 6)
    assert len(set(kept.tolist())) == 6 and sorted(rewards[kept]) == [0.0] * 3 + [1.0] * 3
    with pytest.raises(ValueError, match="m <= n"):
        PodsSettings(n=8, generate=4)


def test_greso_skips_as_the_authors_selector_with_the_same_draws() -> None:
    for history, expected in zip(GRESO_HISTORIES, GRESO_SKIP_PROBABILITIES, strict=True):
        assert greso.skip_probabilities(history, *GRESO_P) == expected
    draws = iter(GRESO_DRAWS)
    assert greso.skip(GRESO_HISTORIES, *GRESO_P, lambda: next(draws)) == GRESO_LOG
    assert next(draws, None) is None  # exactly as many draws as the authors' code took


def test_greso_skip_probability_is_one_minus_the_streak_power_floored_at_one_percent() -> None:
    for streak in range(12):
        easy, _ = greso.skip_probabilities([1.0] * streak or [0.5], 0.6, 0.5)
        assert easy == pytest.approx(1 - max(0.6**streak, 0.01) if streak else 0.0)
        _, hard = greso.skip_probabilities([0.0] * streak or [0.5], 0.5, 0.7)
        assert hard == (pytest.approx(1 - max(0.7**streak, 0.01)) if streak else None)


def test_greso_moves_its_keep_factors_as_the_authors_trainer() -> None:
    settings = greso.GresoSettings()
    p = (settings.p_easy, settings.p_hard)
    for epoch, easy, hard, *expected in GRESO_FACTORS:
        if epoch > 0:
            p = greso.update_factors(*p, easy, hard, settings)
        assert p == pytest.approx(tuple(expected), abs=1e-12)
    p = (0.065, 0.935)
    for easy, hard, *expected in GRESO_BOUNDS:
        p = greso.update_factors(*p, easy, hard, settings)
        assert p == pytest.approx(tuple(expected), abs=1e-12)
    assert settings.targets == pytest.approx((0.25 / 3, 0.5 / 3))
    # all-wrong groups count in neither share (metric_utils.py:205-212): with 0/1 rewards p_hard only rises
    assert greso.group_shares([[1.0] * 8, [0.0] * 8, [0.1] * 8, [0.0, 1.0] * 4]) == (0.25, 0.25)


def test_greso_sizes_its_refills_as_the_authors_trainer_and_survives_an_all_zero_variance_round() -> None:
    settings = greso.GresoSettings()
    for missing, share, size, last in GRESO_REFILL:
        assert greso.refill(missing, share, settings, 256) == (size, last)
    # every group zero-variance: the authors' code raises ZeroDivisionError (ray_trainer.py:1156); the
    # largest round here, not the last
    assert greso.refill(1280, 1.0, settings, 256) == (384, False)
    assert math.isclose(greso.OVERPROVISION, 1.25) and settings.round_sizes(256) == (384, 64)
