"""`repro.simulate.parallel`: methods side by side in worker processes give the serial numbers, in order; and
the response streams the methods of a run share are the ones each would have drawn."""

from __future__ import annotations

import numpy as np

from repro import catalog
from repro.simulate import pass_rates as pr
from repro.simulate.cost import simulate_cost
from repro.simulate.engine import ServerModel
from repro.simulate.parallel import run_methods
from repro.simulate.sampling import simulate_method
from repro.simulate.workload import LengthModel, TrainModel, _Draws


def _numbers(result) -> dict:
    return {k: v for k, v in result.to_dict().items() if k != "seconds"}


def test_side_by_side_methods_give_the_serial_results_in_order() -> None:
    rates = pr.from_beta(0.3, 0.8).dataset(512, np.random.default_rng(0))
    specs = [(m, catalog.get_method(m).sampler_spec(seed=1)) for m in ("grpo-n4", "seq-balance", "knapsack")]
    sampling = {"pass_rates": rates, "steps": 3, "batch": 32, "seed": 1}
    serial = run_methods(simulate_method, specs, sampling, jobs=1)
    parallel = run_methods(simulate_method, specs, sampling, jobs=2)
    assert [r.method for r in parallel] == ["grpo-n4", "seq-balance", "knapsack"]
    assert [_numbers(r) for r in parallel] == [_numbers(r) for r in serial]
    cost = {
        "pass_rates": rates, "server": ServerModel(replicas=2, capacity=16), "lengths": LengthModel(),
        "train": TrainModel(), "steps": 2, "batch": 24, "seed": 1, "overlap": True,
    }  # fmt: skip
    alone = [simulate_cost(name, spec, **cost) for name, spec in specs]
    shared = run_methods(simulate_cost, specs, cost, jobs=2, share_streams=True)
    assert [_numbers(r) for r in shared] == [_numbers(r) for r in alone]
    assert [_numbers(r) for r in run_methods(simulate_cost, specs, cost, jobs=1, share_streams=True)] == [
        _numbers(r) for r in alone
    ]


def test_a_shared_stream_is_the_one_drawn_alone() -> None:
    rates = np.array([0.2, 0.7, 0.5])
    calls = [(1, 3), (0, 5), (1, 40), (1, 90), (2, 64)]

    def replay(draws: _Draws) -> list:
        return [tuple(a.tolist() for a in draws.next(prompt, count)) for prompt, count in calls]

    shared: dict = {}
    other = _Draws(rates, LengthModel(), 4, 1, shared)
    other.next(1, 100)  # another method's longer stream of the same prompt, already in the cache
    other.next(0, 2)
    alone = replay(_Draws(rates, LengthModel(), 4, 1))
    assert replay(_Draws(rates, LengthModel(), 4, 1, shared)) == alone
    assert replay(_Draws(rates, LengthModel(), 4, 2, shared)) != alone  # another step: other streams
