"""The real 135M LLM through verl's real trainer on this CPU, as `repro run --engine verl` runs it: FSDP2 of
a model with tied embeddings, verl's vLLM server with its weight sync after every step, checkpoints with the
Hugging Face copy, then `repro eval` of the final checkpoint, `repro collect` and its table row. Kept small
(2 prompts a step, 24-token responses): the pipeline is under test, not the training effect. One attempt: a
verl kill and resume (with the restored weights reaching the rollout server) is test_verl_async.py's, on the
tiny model; a SmolLM2 attempt costs about 4 min of the suite's 2 cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_verl_engine import _metrics
from verl_slots import SLOTS, verl_slots

from repro.verl_plugin import audit

KEY = "smollm2-135m-instruct"
CELL = f"{KEY}__seq-balance__standard__s0"


def _sums(path: Path) -> Path:
    """One-digit sums in the model's own chat (the pool's harder levels often give all-wrong groups, which
    change no weight and so would not show a resume restoring trained ones)."""
    import numpy as np
    import pandas as pd

    from repro.tasks import tiny_arith

    problems = tiny_arith.sample_problems(np.random.default_rng(0), 16, (1,))
    rows = [tiny_arith.verl_row(p, "train", i, tiny_arith.DATA_SOURCE, KEY) for i, p in enumerate(problems)]
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def test_a_run_syncs_every_step_and_its_final_checkpoint_is_evaluated_and_tabled(smollm2, tmp_path) -> None:
    env = {**os.environ, "REPRO_HOME": str(smollm2.parent.parent), "RAY_DEDUP_LOGS": "0"}
    runs, run = tmp_path / "runs", tmp_path / "runs" / CELL
    argv = [sys.executable, "-m", "repro.cli", "run", "--model", KEY, "--method", "seq-balance", "--engine", "verl"]
    argv += ["--steps", "2", "--batch", "2", "--runs-root", str(runs), "--set", "data.max_response_length=24"]
    argv += ["--set", "trainer.save_freq=2"]  # the final checkpoint only: a 135M model's save is ~2 GB to write
    argv += ["--train-file", str(_sums(tmp_path / "sums.parquet"))]
    with verl_slots(SLOTS):  # about 14 GB while it trains: alone among the suite's verl runs
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [a["state"] for a in json.loads((run / "status.json").read_text())["attempts"]] == ["finished"]
    first = _metrics(run, 1)
    assert sorted(first) == [1, 2]
    lines = (run / "metrics" / "attempt-001.sampler.jsonl").read_text().splitlines()
    sampler = {json.loads(line)["step"]: json.loads(line)["data"] for line in lines}
    assert sampler[1]["sampler/prompts"] == 2 and 2 * 4 <= sampler[1]["sampler/responses_total"] <= 2 * 32
    assert 0.0 <= sampler[1]["sampler/signal_frac"] <= 1.0
    assert first[1]["response_length/max"] <= 24
    assert sampler[1]["sampler/signal_frac"] > 0  # a group with both outcomes: step 1 moved the weights
    # the server took the trained weights after each step: the initial sync, then one new digest a step
    synced = [r for r in audit.read("rollout", run / "metrics" / "attempt-001.jsonl") if r["event"] == "update"]
    assert [r["global_steps"] for r in synced] == [0, 1, 2]
    assert synced[1]["digest"] != synced[0]["digest"] and synced[2]["digest"] != synced[1]["digest"]
    hf = run / "checkpoints" / "global_step_2" / "actor" / "huggingface"
    assert (hf / "config.json").exists() and json.loads((hf / "config.json").read_text())["tie_word_embeddings"]

    eval_argv = ["eval", str(run), "--benchmarks", "tiny-math500", "--first-problems", "2", "--k", "2"]
    eval_argv += ["--pass-k", "1", "--max-new-tokens", "24"]
    evaluated = subprocess.run(
        [sys.executable, "-m", "repro.cli", *eval_argv], env=env, capture_output=True, text=True, timeout=600
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    summary = json.loads((run / "eval" / "global_step_2" / "summary.json").read_text())
    assert summary["generation"]["prompt_template"] == "one-shot" and summary["k"] == 2
    records = (run / "eval" / "global_step_2" / "tiny-math500.jsonl").read_text().splitlines()
    assert len(records) == 4
    results = tmp_path / "results"
    for command in (
        ["collect", "--runs-root", str(runs), "--results", str(results)],
        ["table", "weighted-average", "--results", str(results)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "repro.cli", *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    row = next(line for line in done.stdout.splitlines() if line.strip().startswith(KEY))
    assert "seq-balance" in row and "standard" in row
