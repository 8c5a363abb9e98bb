"""The bench's methods on the CPU trainer: PODS, Knapsack RL and GRESO train tiny-arith through `repro run`
like the paper's methods, log their tokens and own metrics, and keep their cross-step state in checkpoints."""

from __future__ import annotations

import json

import pytest
from test_cpu_run import read_steps, run_cli


def _records(run_dir) -> list[dict]:
    lines = (run_dir / "metrics" / "attempt-001.jsonl").read_text().splitlines()
    return [json.loads(line)["data"] for line in lines]


@pytest.mark.parametrize("method", ["pods-16-4", "knapsack", "greso"])
def test_a_bench_method_trains_tiny_arith_on_the_cpu_trainer(method, tiny_env, tmp_path) -> None:
    run_dir = tmp_path / method
    args = ["run", "--model", "tiny-arith", "--method", method, "--steps", "2", "--batch", "8"]
    done = run_cli(tiny_env, *args, "--run-dir", str(run_dir))
    assert done.returncode == 0, done.stderr
    assert read_steps(run_dir) == [1, 2]
    assert f"kind: {method.split('-')[0]}" in (run_dir / "config.yaml").read_text()
    for data in _records(run_dir):
        # every response drawn generated tokens; the update holds some of them
        assert data["tokens/generated"] >= data["tokens/trained"] > 0
        if method == "pods-16-4":
            assert data["sampler/responses_total"] == 8 * 16 and data["sampler/update_size"] == 8 * 4
        if method == "knapsack":
            # the budget is exactly n = 8 per prompt; at first every prompt is unseen, so 8 each
            assert data["sampler/responses_total"] == 8 * 8 and data["knapsack/alloc_max"] == 8
        if method == "greso":
            assert data["greso/rounds"] >= 1 and data["greso/prompts_drawn"] >= 12  # a round: 1.5 x 8 prompts
            assert data["sampler/update_prompts"] <= 8
    state = run_dir / "checkpoints" / "global_step_2" / "estimator.json"
    if method == "pods-16-4":
        assert not state.exists()  # PODS keeps nothing across steps
    else:  # the buffer of outcomes (Knapsack) or the histories and keep factors (GRESO), saved with the step
        saved = json.loads(state.read_text())
        assert ("outcomes" in saved) if method == "knapsack" else {"p_easy", "p_hard", "histories"} <= set(saved)
