"""The released Est sampler (RLHFlow/Reinforce-Ada ray_trainer_ema.py), checked against hand-worked cases.

Every expected number below is worked out by hand from the released rules (one response per prompt, the
rest in proportion to 1/p_hat, floors then largest remainders in batch order; p_hat = (1 + positives) /
(17 + responses) from counts discounted by 0.9 at each visit; A = r - share of positives, r alone for a
prompt with one response), not by running the code under test.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from repro import catalog
from repro.sampling import BetaBernoulliEstimator, StepSampler, inverse_allocation, make_estimator


def _spec(**kw):
    return catalog.get_method("est-released").sampler_spec(**kw)


@pytest.mark.parametrize(
    ("p_hat", "budget", "expected"),
    [
        # weights 2, 10, 20 (sum 32); 21 to share: 1.3125, 6.5625, 13.125 -> floors 1, 6, 13, one left for .5625
        ([0.5, 0.1, 0.05], 24, [2, 8, 14]),
        # 464be47's doubled budget: 45 to share: 2.8125, 14.0625, 28.125 -> floors 2, 14, 28, one left for .8125
        ([0.5, 0.1, 0.05], 48, [4, 15, 29]),
        # equal weights: 1 + 7 each, nothing left over (a first epoch: every prompt unseen)
        ([1 / 17] * 5, 40, [8] * 5),
        # 1 to share among three equal shares of 1/3: the tie goes to the first prompt in batch order
        ([0.2, 0.2, 0.2], 4, [2, 1, 1]),
        # a budget below one per prompt still gives every prompt one (the released base_each)
        ([0.3, 0.6], 1, [1, 1]),
        # p_hat 0 is clamped to 1e-6 for the weight: weights 1e6 and 2 -> the hard prompt takes all 6
        ([0.0, 0.5], 8, [7, 1]),
    ],
)
def test_allocation_matches_hand_worked_cases(p_hat, budget, expected) -> None:
    out = inverse_allocation(np.array(p_hat), budget)
    assert out.tolist() == expected
    assert out.dtype == np.int64


def test_allocation_has_no_cap_and_sums_to_the_budget_on_rational_cases() -> None:
    # exact rational arithmetic as the reference: p_hat = 1/2^k gives weights 2^k, shares exact in binary
    rng = np.random.default_rng(3)
    for _ in range(50):
        k = rng.integers(0, 8, size=int(rng.integers(2, 12)))
        p_hat = 1.0 / 2.0**k
        budget = int(rng.integers(len(k), 10 * len(k)))
        weights = [Fraction(2) ** int(e) for e in k]
        rest = budget - len(k)
        shares = [rest * w / sum(weights) for w in weights]
        floors = [s.numerator // s.denominator for s in shares]
        left = rest - sum(floors)
        order = sorted(range(len(k)), key=lambda i: shares[i] - floors[i], reverse=True)
        want = [1 + f for f in floors]
        for i in range(left):
            want[order[i]] += 1
        got = inverse_allocation(p_hat, budget)
        assert got.tolist() == want
        assert int(got.sum()) == budget
    assert inverse_allocation(np.array([1e-3, 0.9, 0.9, 0.9]), 32).max() > 26  # no n_max: the hard prompt takes most


def test_estimator_is_a_fixed_beta_1_16_over_counts_discounted_per_visit() -> None:
    est = make_estimator(_spec())
    assert est.p_hat(["a"])[0] == pytest.approx(1 / 17)  # unseen
    est.update(["a", "b"], np.array([3, 0]), np.array([8, 8]))
    assert est.p_hat(["a", "b"]).tolist() == pytest.approx([4 / 25, 1 / 25])
    est.update(["a"], np.array([1]), np.array([2]))  # only a is visited: b is not discounted
    assert est.p_hat(["a"])[0] == pytest.approx((1 + 0.9 * 3 + 1) / (17 + 0.9 * 8 + 2))
    assert est.p_hat(["b"])[0] == pytest.approx(1 / 25)
    assert est.p_hat(["never"])[0] == pytest.approx(1 / 17)  # the fixed prior does not follow the batch rate


def test_estimator_state_round_trips_and_old_states_load_as_running(tmp_path) -> None:
    est = make_estimator(_spec())
    est.update(["a"], np.array([2]), np.array([5]))
    est.save(tmp_path / "e.json")
    back = BetaBernoulliEstimator.load(tmp_path / "e.json")
    assert (back.prior, back.alpha, back.beta) == ("fixed", 1.0, 16.0)
    assert back.p_hat(["a", "z"]).tolist() == pytest.approx([3 / 22, 1 / 17])
    state = est.state_dict()
    for key in ("prior", "alpha", "beta"):
        del state["params"][key]
    old = BetaBernoulliEstimator(2.0, 0.9, 0.02)
    old.load_state_dict(state)
    assert old.prior == "running"


def test_two_steps_allocate_train_every_response_and_baseline_as_released() -> None:
    spec = _spec()
    est = make_estimator(spec)
    first = StepSampler(spec, ["a", "b", "c"], step=0, estimator=est)
    slots, counts = first.plan()
    assert counts.tolist() == [8, 8, 8]  # all unseen: equal weights
    rewards = np.zeros((3, 8))
    rewards[0, :6] = 1.0  # a: 6 of 8
    rewards[1, :1] = 1.0  # b: 1 of 8
    first.observe_many(slots, rewards)  # c: 0 of 8
    result = first.finalize()
    assert result.slot.size == 24  # every response is trained
    assert result.pool_mean.tolist() == pytest.approx([6 / 8, 1 / 8, 0.0])
    assert result.advantage[result.slot == 0].tolist() == pytest.approx([0.25] * 6 + [-0.75] * 2)
    assert np.all(result.weight == 1.0)
    # p_hat: a 7/25, b 2/25, c 1/25 -> weights 25/7, 12.5, 25 (sum 41.0714...); 21 to share
    second = StepSampler(spec, ["a", "b", "c", "d"], step=1, estimator=est)
    assert second.p_hat.tolist() == pytest.approx([7 / 25, 2 / 25, 1 / 25, 1 / 17])
    _, counts = second.plan()
    # weights 25/7, 12.5, 25, 17 (sum 58.0714...); 28 to share: 1.722, 6.027, 12.054, 8.197
    # floors 1, 6, 12, 8 (27), one left for a (.722) -> 1 + [2, 6, 12, 8]
    assert counts.tolist() == [3, 7, 13, 9]


def test_a_prompt_with_one_response_has_advantage_r() -> None:
    spec = _spec()
    est = make_estimator(spec)
    est.update(["easy"], np.array([40]), np.array([40]))  # p_hat 41/57: weight ~1.4 against 17 for "hard"
    sampler = StepSampler(spec, ["easy", "hard"], step=0, estimator=est)
    slots, counts = sampler.plan()
    # weights 57/41 and 17 (sum 18.39); 14 to share: 1.058, 12.94 -> floors 1, 12, one left for hard
    assert counts.tolist() == [2, 14]
    spec1 = spec.with_(n_avg=1)
    lone = StepSampler(spec1, ["x", "y"], step=0, estimator=make_estimator(spec1))
    slots, counts = lone.plan()
    assert counts.tolist() == [1, 1]
    lone.observe_many(slots, np.array([[1.0], [0.0]]))
    result = lone.finalize()
    assert result.advantage.tolist() == [1.0, 0.0]  # baseline 0 for a group of one, not r itself


def test_catalog_entry_is_sourced_and_distinct_from_the_paper_est() -> None:
    released = catalog.get_method("est-released")
    paper = catalog.get_method("est")
    assert released.kind == paper.kind == "est" and released.paper is False
    for name in ("allocation", "prior", "prior_alpha", "prior_beta", "decay", "p_min", "est_advantage", "n_avg"):
        assert "ray_trainer_ema.py" in released.sampler[name].source, name
    assert (paper.sampler_spec().allocation, paper.sampler_spec().est_advantage) == ("sqrt", "weighted")
