"""The overlapped (async) schedule of the cost model against hand-worked makespans, the synchronous schedule
it must reduce to with nothing in flight ahead, and the bounds no schedule can beat."""

from __future__ import annotations

import numpy as np
import pytest

from repro import catalog
from repro.sampling import make_estimator
from repro.simulate.cost import LengthModel, TrainModel, _Draws, _prompt_order, run_step, simulate_cost
from repro.simulate.engine import ServerModel
from repro.simulate.overlap import STEADY_MIN_STEPS, simulate_overlap

T0, T1 = 0.01, 0.001


def _overlap(method: str, rates, server, lengths, train, *, steps: int, batch: int, ahead: int, seed: int = 0):
    spec = catalog.get_method(method).sampler_spec(seed=seed)
    return simulate_overlap(
        spec, rates, server=server, lengths=lengths, train=train, steps=steps, batch=batch, seed=seed,
        draw_prompts=_prompt_order(rates.size, seed), ahead=ahead,
        estimator=make_estimator(spec) if spec.kind == "est" else None,
    )  # fmt: skip


def test_two_steps_of_one_prompt_by_hand() -> None:
    """GRPO-n4 on one prompt that is always wrong: every response is 100 tokens (sigma 0).

    With one step ahead both steps' 8 requests run together: each finishes at 100 (t0 + 8 t1); step 0 is
    then updated (2 s) and step 1, already generated, right after. Nothing ahead: two waves of 4, each
    100 (t0 + 4 t1) and its update."""
    server = ServerModel(replicas=1, capacity=16, t0=T0, t1=T1, prefill_per_token=0.0)
    lengths = LengthModel(50, 100, 0.0, 1000)
    train = TrainModel(per_token=0.0, fixed=2.0)
    rates = np.zeros(3)
    ahead = _overlap("grpo-n4", rates, server, lengths, train, steps=1, batch=1, ahead=1)
    wave8 = 100 * (T0 + 8 * T1)
    assert ahead.step_ends == pytest.approx([wave8 + 2.0, wave8 + 4.0], rel=1e-12)
    assert ahead.step_s == pytest.approx((wave8 + 4.0) / 2) and ahead.train_s == pytest.approx(2.0)
    assert ahead.staleness_max == 1  # step 1 was requested before update 0
    none = _overlap("grpo-n4", rates, server, lengths, train, steps=1, batch=1, ahead=0)
    wave4 = 100 * (T0 + 4 * T1)
    assert none.step_ends == pytest.approx([wave4 + 2.0, 2 * wave4 + 4.0], rel=1e-12)
    assert none.staleness_max == 0


def test_the_steady_step_is_the_mean_of_whole_short_long_pairs_by_hand() -> None:
    """The same prompt, one step ahead, 20 steps: steps 2k and 2k+1 are generated together (one wave of 8), so
    the gaps between update ends alternate: 2 s (the second update, its step already done) and a wave plus an
    update. The steady step averages whole pairs without the first gap and the last: (wave8 + 4) / 2 exactly,
    while the whole run's average still carries the fill; a short run has no steady value."""
    server = ServerModel(replicas=1, capacity=16, t0=T0, t1=T1, prefill_per_token=0.0)
    lengths = LengthModel(50, 100, 0.0, 1000)
    train = TrainModel(per_token=0.0, fixed=2.0)
    wave8 = 100 * (T0 + 8 * T1)
    long = _overlap("grpo-n4", np.zeros(3), server, lengths, train, steps=STEADY_MIN_STEPS + 3, batch=1, ahead=1)
    gaps = np.diff(long.step_ends)
    assert gaps[::2] == pytest.approx([2.0] * len(gaps[::2])) and gaps[1::2] == pytest.approx(
        [wave8 + 2.0] * len(gaps[1::2])
    )
    assert long.steady_step_s == pytest.approx((wave8 + 4.0) / 2, rel=1e-12)
    short = _overlap("grpo-n4", np.zeros(3), server, lengths, train, steps=STEADY_MIN_STEPS + 1, batch=1, ahead=1)
    assert short.steady_step_s is None  # 16 gaps less the first and the last: too few


@pytest.mark.parametrize("method", ["grpo-n4", "seq-balance-stream", "seq-pos-stream"])
def test_nothing_ahead_is_the_streamed_synchronous_schedule(method: str) -> None:
    """With no step admitted early, each step meets an idle server: its interval is exactly the
    synchronous streamed step of the same draws (run_step), generation plus update."""
    server = ServerModel(replicas=2, capacity=16, t0=T0, t1=T1, prefill_per_token=1e-5, prompt_tokens=50)
    lengths = LengthModel(80, 160, 0.5, 400)
    train = TrainModel(per_token=1e-4, fixed=1.5)
    rates = np.random.default_rng(1).beta(0.6, 1.2, 200)
    steps, batch = 3, 12
    over = _overlap(method, rates, server, lengths, train, steps=steps, batch=batch, ahead=0)
    spec = catalog.get_method(method).sampler_spec(seed=0)
    order = _prompt_order(rates.size, 0)
    sync = [run_step(spec, order(batch), _Draws(rates, lengths, 0, s), server, train, step=s) for s in range(steps + 1)]
    assert np.diff(over.step_ends) == pytest.approx([c.step_s for c in sync[1:]], rel=1e-9)
    assert over.step_ends[0] == pytest.approx(sync[0].step_s, rel=1e-9)
    assert over.tokens_per_step == pytest.approx([c.generated_tokens for c in sync], rel=1e-9)


@pytest.mark.parametrize("method", ["grpo-n4", "seq-balance", "est", "dapo"])
def test_one_step_ahead_is_faster_than_sync_and_never_beats_the_floor(method: str) -> None:
    server = ServerModel(replicas=2, capacity=32, t0=T0, t1=T1, prefill_per_token=1e-5, prompt_tokens=50)
    lengths = LengthModel(80, 160, 0.5, 400)
    train = TrainModel(per_token=1e-4, fixed=1.5)
    rates = np.random.default_rng(2).beta(0.6, 1.2, 400)
    over = _overlap(method, rates, server, lengths, train, steps=4, batch=24, ahead=1)
    # every token of the steps trained was generated before the last update ended, at most at peak rate,
    # and the servers generated nothing during the updates
    floor = sum(over.tokens_per_step) / server.peak_throughput + sum(over.train_times)
    assert over.step_ends[-1] >= floor * (1 - 1e-9)
    assert over.step_s * len(over.step_ends) == pytest.approx(over.step_ends[-1])  # the whole run over its steps
    assert 1 <= over.staleness_max <= 2 and 0 < over.staleness_mean <= over.staleness_max
    spec = catalog.get_method(method).sampler_spec(seed=0)
    sync = simulate_cost(method, spec, rates, server=server, lengths=lengths, train=train, steps=4, batch=24, seed=0)
    assert over.step_s < sync.step_s


def test_cost_rows_carry_the_async_schedule_and_its_ratio() -> None:
    server = ServerModel(replicas=2, capacity=32, t0=T0, t1=T1, prefill_per_token=0.0)
    lengths, train = LengthModel(80, 160, 0.5, 400), TrainModel(per_token=1e-4, fixed=1.5)
    rates = np.random.default_rng(3).beta(0.6, 1.2, 300)
    kw = {"server": server, "lengths": lengths, "train": train, "steps": 2, "batch": 16, "seed": 0}
    rows = [
        simulate_cost(m, catalog.get_method(m).sampler_spec(seed=0), rates, overlap=True, **kw)
        for m in ("grpo-n4", "seq-balance")
    ]
    from repro.simulate.cost import add_ratios

    add_ratios(rows)
    ref, seq = rows
    assert seq.async_ratio_to_grpo_n4 == pytest.approx(seq.async_step_s / ref.step_s)
    assert seq.floor_s == pytest.approx(seq.lower_bound_s + seq.train_s)
    assert seq.to_dict()["async_step_s"] == seq.async_step_s and "floor_s" in seq.to_dict()
    plain = simulate_cost("grpo-n4", catalog.get_method("grpo-n4").sampler_spec(seed=0), rates, **kw)
    assert plain.async_step_s is None and plain.step_s == ref.step_s  # the sync numbers do not move


def test_cli_writes_the_async_columns_and_the_schedules_figure(tmp_path, capsys) -> None:
    import json

    from repro.cli import main

    cost = tmp_path / "cost.json"
    argv = ["simulate", "cost", "--methods", "grpo-n4,seq-balance,seq-balance-stream", "--steps", "1"]
    argv += ["--batch", "16", "--replicas", "1", "--capacity", "32", "--out", str(cost)]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "async: the overlapped schedule" in " ".join(table.split())  # the caption, however the table wraps
    doc = json.loads(cost.read_text())
    assert doc["settings"]["overlap"] is True and doc["settings"]["ahead"] == 2
    rows = {r["method"]: r for r in doc["methods"]}
    assert rows["seq-balance"]["async_step_s"] < rows["seq-balance"]["step_s"]
    assert rows["seq-balance"]["floor_s"] == pytest.approx(
        rows["seq-balance"]["lower_bound_s"] + rows["seq-balance"]["train_s"]
    )
    assert main(["plot", "schedules", "--cost", str(cost), "--out", str(tmp_path / "fig")]) == 0
    assert (tmp_path / "fig.png").stat().st_size > 10_000 and (tmp_path / "fig.pdf").exists()
    assert main(["plot", "schedules", "--cost", str(tmp_path / "none.json")]) == 2
    assert "run `repro simulate cost --out" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert main(["plot", "schedules", "--cost", str(tmp_path / "bad.json")]) == 2
