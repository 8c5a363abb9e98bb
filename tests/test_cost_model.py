"""The continuous-batching cost model against closed forms, the methods' schedules against hand-computed
makespans, and the plugin's timed rollout against the model (same pools; pool sizes match the exact
Seq distribution under both schedules)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from repro import catalog
from repro.cli import main
from repro.simulate.cost import LengthModel, TrainModel, _Draws, run_step, simulate_cost
from repro.simulate.engine import BatchingEngine, ServerModel
from repro.simulate.exact import seq_exact

T0, T1 = 0.01, 0.001


def _drain(engine: BatchingEngine) -> dict[int, float]:
    done = {}
    while not engine.idle:
        done.update(engine.step())
    return done


def test_one_wave_of_equal_lengths_is_length_times_iteration() -> None:
    engine = BatchingEngine(ServerModel(replicas=1, capacity=8, t0=T0, t1=T1, prefill_per_token=0.0))
    for i in range(5):
        engine.submit(i, 100)
    done = _drain(engine)
    assert sorted(done) == list(range(5))
    assert all(t == pytest.approx(100 * (T0 + 5 * T1), rel=1e-12) for t in done.values())
    assert engine.tokens == pytest.approx(500)


def test_two_waves_and_staggered_lengths_follow_the_closed_form() -> None:
    model = ServerModel(replicas=1, capacity=4, t0=T0, t1=T1, prefill_per_token=0.0)
    engine = BatchingEngine(model)
    for i in range(8):
        engine.submit(i, 50)
    done = _drain(engine)
    wave = 50 * (T0 + 4 * T1)
    assert sorted(done.values()) == pytest.approx([wave] * 4 + [2 * wave] * 4, rel=1e-12)
    # lengths 10, 30, 60 together: the running count drops as each one finishes
    engine = BatchingEngine(model)
    for i, length in enumerate((10, 30, 60)):
        engine.submit(i, length)
    done = _drain(engine)
    t_a = 10 * (T0 + 3 * T1)
    t_b = t_a + 20 * (T0 + 2 * T1)
    t_c = t_b + 30 * (T0 + 1 * T1)
    assert [done[0], done[1], done[2]] == pytest.approx([t_a, t_b, t_c], rel=1e-12)


def test_prefill_stalls_and_replicas_share_the_load() -> None:
    model = ServerModel(replicas=2, capacity=1, t0=T0, t1=T1, prefill_per_token=1e-3, prompt_tokens=20)
    engine = BatchingEngine(model)
    for i in range(3):
        engine.submit(i, 10)
    done = _drain(engine)
    one = 0.02 + 10 * (T0 + T1)  # prefill, then decode alone
    assert [done[0], done[1], done[2]] == pytest.approx([one, one, 2 * one], rel=1e-12)
    assert engine.busy == pytest.approx(3 * one, rel=1e-12)  # server-seconds
    assert model.peak_throughput == pytest.approx(2 / (T0 + T1))


def test_uniform_step_is_one_batch_and_its_makespan() -> None:
    """GRPO-n4 on 6 prompts, all 24 requests in one wave: the makespan from the sorted lengths."""
    spec = catalog.get_method("grpo-n4").sampler_spec(seed=0)
    rates = np.full(50, 0.4)
    server = ServerModel(replicas=1, capacity=64, t0=T0, t1=T1, prefill_per_token=0.0)
    lengths = LengthModel(200, 400, 0.5, 1000)
    cost = run_step(spec, range(6), _Draws(rates, lengths, 3, 0), server, TrainModel(1e-4, 2.0))
    drawn = np.sort(np.concatenate([_Draws(rates, lengths, 3, 0).next(i, 4)[1] for i in range(6)]))
    running = 24 - np.arange(24)
    expected = float(np.sum(np.diff(np.concatenate([[0], drawn])) * (T0 + T1 * running)))
    assert cost.generation_s == pytest.approx(expected, rel=1e-9)
    assert cost.responses == 24 and cost.generated_tokens == pytest.approx(drawn.sum())
    assert cost.update_tokens == drawn.sum() + 24 * server.prompt_tokens
    assert cost.train_s == pytest.approx(2.0 + 1e-4 * cost.update_tokens)


def test_with_unlimited_slots_streaming_is_the_longest_chain_and_sync_the_sum_of_round_maxima() -> None:
    """t1 = 0 and room for every request: each batch lasts t0 x its longest response, so streaming ends
    with the slowest prompt's chain and synchronous rounds with the sum over rounds of the round maximum."""
    base = catalog.get_method("seq-balance").sampler_spec(seed=0)
    rates = np.random.default_rng(1).uniform(0.05, 0.6, 40)
    server = ServerModel(replicas=1, capacity=10_000, t0=T0, t1=0.0, prefill_per_token=0.0)
    lengths = LengthModel(100, 300, 0.7, 2000)
    ids = list(range(40))
    sync = run_step(dataclasses.replace(base, streaming=False), ids, _Draws(rates, lengths, 5, 2), server, TrainModel())
    stream = run_step(
        dataclasses.replace(base, streaming=True), ids, _Draws(rates, lengths, 5, 2), server, TrainModel()
    )
    assert np.array_equal(sync.pool_sizes, stream.pool_sizes)  # only the schedule differs
    draws = _Draws(rates, lengths, 5, 2)
    maxima = np.zeros((40, base.max_rounds))
    for i in ids:
        for r in range(int(sync.pool_sizes[i]) // base.round_size):
            maxima[i, r] = draws.next(i, base.round_size)[1].max()
    assert stream.generation_s == pytest.approx(T0 * maxima.sum(axis=1).max(), rel=1e-9)
    assert sync.generation_s == pytest.approx(T0 * maxima.max(axis=0).sum(), rel=1e-9)
    assert stream.critical_path_s == pytest.approx(stream.generation_s, rel=1e-9)
    assert sync.generation_s > stream.generation_s


def test_every_method_runs_and_streaming_never_costs_more(tmp_path) -> None:
    rates = np.random.default_rng(0).beta(0.26, 0.73, 2000)
    server = ServerModel(replicas=2, capacity=32)
    out = {}
    for name in ("grpo-n4", "dapo", "est", "seq-pos", "seq-pos-stream", "seq-balance", "seq-balance-stream"):
        spec = catalog.get_method(name).sampler_spec(seed=0)
        out[name] = simulate_cost(
            name, spec, rates, server=server, lengths=LengthModel(), train=TrainModel(), steps=2, batch=32, seed=0
        )
    assert out["grpo-n4"].responses == 32 * 4
    assert out["est"].responses == 32 * 8  # n_avg x prompts
    assert (2 * out["dapo"].responses) % (32 * 4) == 0 and out["dapo"].responses >= 32 * 4  # whole refill batches
    for kind in ("seq-pos", "seq-balance"):
        assert out[f"{kind}-stream"].responses == out[kind].responses
        assert out[f"{kind}-stream"].generation_s <= out[kind].generation_s * (1 + 1e-9)
    for row in out.values():
        assert row.generation_s >= row.lower_bound_s * (1 - 1e-9)
        assert row.generation_s >= row.critical_path_s * (1 - 1e-9)


def test_simulate_cost_cli_json(capsys) -> None:
    code = main(["simulate", "cost", "--methods", "grpo-n4,seq-balance", "--steps", "1", "--batch", "16",
                 "--replicas", "1", "--capacity", "32", "--json"])  # fmt: skip
    assert code == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    rows = {r["method"]: r for r in doc["methods"]}
    assert rows["grpo-n4"]["ratio_to_grpo_n4"] == 1.0 and rows["seq-balance"]["ratio_to_grpo_n4"] > 1.0
    assert doc["server"]["peak_tokens_per_s"] == pytest.approx(32 / (0.012 + 6e-5 * 32))
    assert main(["simulate", "cost", "--methods", "nope"]) == 2


@pytest.mark.parametrize("streaming", [False, True])
def test_plugin_rollout_against_the_emulated_server_draws_the_exact_seq_pool_sizes(streaming) -> None:
    """Through ada_loop + FakeLLMServer (fast clock): pools equal the cost model's for the same streams, and
    pool sizes over 400 prompts follow the exact Seq-balance distribution (chi-square, p > 1e-3)."""
    from repro.simulate.measure import measure_step

    spec = dataclasses.replace(catalog.get_method("seq-balance").sampler_spec(seed=0), streaming=streaming)
    rates = np.random.default_rng(7).beta(0.5, 1.0, 400)
    server = ServerModel(replicas=1, capacity=256)
    measured = measure_step(spec, rates, list(range(400)), server=server, lengths=LengthModel(), scale=1e-5, seed=9)
    assert measured.responses == measured.pool_sizes.sum()
    exact = seq_exact(rates, spec)
    observed = np.bincount(measured.pool_sizes, minlength=exact.sizes.max() + 1)[exact.sizes]
    expected = exact.pool_size_pmf.sum(axis=0)
    assert observed.sum() == 400 and expected.sum() == pytest.approx(400)
    keep = expected > 0
    assert observed[~keep].sum() == 0
    _chi2, p = stats.chisquare(observed[keep], expected[keep] * observed.sum() / expected[keep].sum())
    assert p > 1e-3, (observed, expected)


def test_simulate_cost_converts_each_methods_tokens_into_grpo_n4_steps(capsys) -> None:
    """Every response exactly 800 tokens (sigma 0, one median): GRPO-n16 generates 4x GRPO-n4's tokens a step,
    so the paper's 600 steps of it are 2,400 GRPO-n4 steps; --train-steps changes the length converted."""
    import json

    args = ["simulate", "cost", "--methods", "grpo-n4,grpo-n16", "--steps", "1", "--batch", "16", "--replicas", "1",
            "--capacity", "32", "--len-correct", "800", "--len-incorrect", "800", "--len-sigma", "0",
            "--no-overlap"]  # fmt: skip
    for extra, steps in (([], 600), (["--train-steps", "100"], 100)):
        assert main([*args, *extra, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        rows = {r["method"]: r for r in doc["methods"]}
        assert doc["settings"]["train_steps"] == steps
        assert rows["grpo-n4"]["generated_tokens"] == 16 * 4 * 800
        assert rows["grpo-n16"]["tokens_ratio_to_grpo_n4"] == 4.0
        assert rows["grpo-n4"]["grpo_n4_steps_at_equal_tokens"] == steps
        assert rows["grpo-n16"]["grpo_n4_steps_at_equal_tokens"] == 4 * steps
