"""repro.evaluation.generator_pool: the filter's generate calls over worker processes give the same texts, in the
same order, as the calls made one by one in this process (each call has its own seed)."""

from __future__ import annotations

from repro.cpu_lm.model import TinyModelSpec, model_folder
from repro.evaluation.generator_pool import GeneratorPool
from repro.evaluation.transformers_generator import TransformersGenerator


def test_two_workers_give_the_bits_of_one_process(tiny_home) -> None:
    tiny_model_dir = model_folder(TinyModelSpec(), tiny_home)
    problems = [f"What is {a} plus {b}?" for a, b in [(2, 3), (7, 9), (11, 4), (6, 6), (13, 8)]]
    calls = [(problems[:3], 4, 101), (problems[3:], 4, 102), (problems[1:4], 2, 103)]
    here = TransformersGenerator(tiny_model_dir, max_new_tokens=12)
    expected = [here.generate(*call) for call in calls]
    with GeneratorPool(2, tiny_model_dir, 12) as pool:
        got = list(pool.generate_all(calls))
        assert pool.generate(*calls[1]) == expected[1]
        assert pool._pool is not None
    assert pool._pool is None  # the workers stopped on leaving
    assert got == expected
    assert [len(g) for g in got] == [3, 2, 3] and all(len(x) == 4 for x in got[0])
    assert len({t for group in got[0] for t in group}) > 1  # sampled, not one repeated text
    with GeneratorPool(2, tiny_model_dir, 12) as idle:
        assert list(idle.generate_all([])) == [] and idle._pool is None  # nothing to do starts no worker
