"""Est on verl's colocate_async trainer through the plugin (`repro run --method est --async --engine verl`),
killed with SIGKILL after its step-2 checkpoint and resumed: the suite's one verl kill and resume of the tiny
model (SmolLM2's, in test_smollm2_verl.py, is the sync trainer's).

What it shows, read from verl's own metrics and the plugin's side files: the manager returned before the
step's sampling was done (batches trained on weights newer than the ones they were sampled with: verl's
staleness reached past 0) and staleness never passed the catalog's bound, resumed responses are counted, every step is
logged once across the kill, the resumed manager restored Est's estimator from exactly the checkpoint verl
resumed from, and after the resume every row verl trained found its prompt's pool statistics (restored from
the checkpoint for the prompts sampled before the kill) and was weighted as Est weighs it. Est rather than
Seq-balance: its estimator is the one piece of the plugin's own state a resume must restore, and the sweep
(tests/verl_sweep.py) already trains Seq-balance; one run shows both (a verl run costs about 2 min of
start-up on 2 cores).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_verl_engine import _argv, _metrics, kill_after_step, verl_env  # noqa: F401  (verl_env: a fixture)
from verl_slots import verl_slots

from repro import catalog
from repro.verl_plugin import audit

STEPS = 4
METHOD = "est"
BATCH = 8  # tests/verl_sweep.py's, which _argv passes
STALE = "training/off_policy/trajectory_staleness_worst/max"  # versions behind, counted from a trajectory's start
SPANS = "training/off_policy/trajectory_spans/max"  # weight versions one trajectory was sampled across
# A server that samples at most one batch's round at a time (64 requests, vLLM's max_num_seqs): the batches in
# flight then finish one after another, so when the trainer takes the first, the others are mid-round and
# verl's abort may cut them (in lockstep, nothing would be running at the abort).
AHEAD = ("actor_rollout_ref.rollout.max_num_seqs=64",)


@pytest.fixture(scope="module")
def async_run(verl_env, tmp_path_factory) -> Path:  # noqa: F811
    tmp = tmp_path_factory.mktemp("verl_async")
    runs = tmp / "runs"
    run = runs / f"tiny-arith__{METHOD}-async__standard__s0"
    argv = [*_argv(runs, METHOD, STEPS, "trainer.save_freq=2", *AHEAD), "--async"]
    # the timeouts are hang guards only (the kill waits for the run to reach step 3, not for a time): a verl run
    # that takes ~3 min on 2 cores took over 10 min at load 15-19
    with verl_slots():
        kill_after_step(argv, verl_env, run, 2, tmp / "attempt-1.log", timeout=1500)
        resumed = subprocess.run(argv, env=verl_env, capture_output=True, text=True, timeout=1500)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return run


def test_async_run_logs_every_step_once_across_the_kill(async_run) -> None:
    first, second = _metrics(async_run, 1), _metrics(async_run, 2)
    assert sorted(first) == [1, 2] and min(second) == 3  # killed where step 3 began (kill_after_step)
    assert sorted([*first, *second]) == list(range(1, STEPS + 1))  # each step once across both attempts
    config = (async_run / "config.yaml").read_text()
    assert "trainer.v1.trainer_mode=repro_colocate_async" in config
    states = [a["state"] for a in json.loads((async_run / "status.json").read_text())["attempts"]]
    assert states in (["interrupted", "finished"], ["failed", "finished"]), states


def test_the_resumed_server_takes_the_restored_weights_not_the_base_model(async_run) -> None:
    """verl starts vLLM on the base model's weights; after the resume its first sync must bring the step-2
    weights verl restored from the checkpoint: the digest attempt 1 synced after step 2 (the kill comes where
    step 3 begins, after that sync: kill_after_step), and never the base model's."""
    first = audit.read("rollout", async_run / "metrics" / "attempt-001.jsonl")
    before = {r["global_steps"]: r["digest"] for r in first if "digest" in r}  # the start and updates, not aborts
    synced = [r for r in audit.read("rollout", async_run / "metrics" / "attempt-002.jsonl") if r["event"] == "update"]
    assert synced and synced[0]["global_steps"] == 2, synced
    assert synced[0]["digest"] != before[None]
    assert synced[0]["digest"] == before[2]


def _steps(run: Path) -> dict[int, dict]:
    """Every step of both attempts as collect reads them: a batch sampled before the kill and trained after
    the resume (verl restores it from its checkpoint) brings its sampler line from attempt 1."""
    from repro.rundir import RunDir

    return RunDir(run).read_metrics().by_step


def _sampled(steps: dict[int, dict]) -> list[int]:
    """The steps with a sampler line, at least one of them after the resume. A submission of k batches (verl's
    first holds the warm-up batch too) is logged once, at the first step it trains, so step 2 has none; which
    batches a resumed attempt samples again depends on where the kill lands, so a second step may lack one
    (the reader's carrying of lines across attempts is tested exactly in test_rundir.py)."""
    with_line = [s for s in steps if "sampler/prompts" in steps[s]]
    assert steps[1]["sampler/prompts"] == 2 * BATCH  # the warm-up batch and step 1's, one submission
    assert len(set(steps) - set(with_line)) <= 2 and max(with_line) > 2, sorted(with_line)
    return with_line


def test_the_resumed_run_restores_the_estimator_of_the_checkpoint_verl_resumed_from(async_run) -> None:
    assert (async_run / "checkpoints" / "global_step_2" / "reinforce_ada_state.json").exists()
    restored = audit.read("est", async_run / "metrics" / "attempt-002.jsonl")
    assert [r["restored_step"] for r in restored] == [2]
    steps = _steps(async_run)
    assert sorted(steps) == list(range(1, STEPS + 1))
    sampled = _sampled(steps)
    assert [s for s in sampled if s > 2] and all(any(k.startswith("est/") for k in steps[s]) for s in sampled)


def test_staleness_stays_within_the_bound_and_sampling_runs_ahead(async_run) -> None:
    """Sampling ahead is read from verl's staleness (the warm-up's prompts are sampled on the starting
    weights and not all trained at step 1). Whether two consecutive batches sample at once
    (`async/overlap_s` > 0) is timing: colocate_async sleeps the server while it trains, so a batch's requests
    an abort cut resume after the weight update and may all finish before the next submission (CI's machine:
    0.0 at all four steps). So the overlap is only checked to be a part of its batch's sampling time."""
    bound = catalog.async_schedule()["trainer.v1.sampler.max_off_policy_threshold"].value - 1
    steps = _steps(async_run)
    stale = [steps[s][STALE] for s in sorted(steps)]
    assert max(stale) <= bound, stale
    assert max(stale) >= 1, stale  # trained on batches sampled ahead, not synchronously
    sampled = _sampled(steps)
    assert len(sampled) >= 2 and all(steps[s]["async/gen_s"] > 0 for s in sampled)
    assert all(0.0 <= steps[s]["async/overlap_s"] <= steps[s]["async/gen_s"] for s in sampled), steps


def test_resumed_responses_are_counted_where_verl_sees_trajectories_span_versions(async_run) -> None:
    """`async/resumed_responses` counts the responses of a batch's pools that were sampled across a weight update
    (cut by an abort, finished by verl's client on the new weights); verl's trajectory spans look at the trained
    ones only, a subset: a batch with no resumed response has no trajectory spanning two versions. Whether an
    abort lands mid-request depends on timing; the server's abort and resume are tested exactly in
    test_cpu_rollout.py."""
    steps = _steps(async_run)
    # a batch sampled before the kill and trained after the resume brings attempt 1's count, written before verl
    # finished its cut requests in attempt 2 (seen in a clean-clone suite: step 3, count 0, spans 2): not paired
    trained_1 = {json.loads(line)["step"] for line in (async_run / "metrics" / "attempt-001.jsonl").open()}
    counted_1 = {json.loads(line)["step"] for line in (async_run / "metrics" / "attempt-001.sampler.jsonl").open()}
    across = counted_1 - trained_1
    for step in _sampled(steps):
        record = steps[step]
        assert record["async/resumed_responses"] >= 0
        if record["async/resumed_responses"] == 0 and step not in across:
            assert record[SPANS] == 1, step
    events = [
        e for attempt in (1, 2) for e in audit.read("rollout", async_run / "metrics" / f"attempt-{attempt:03d}.jsonl")
    ]
    assert all(e["aborted"] >= 1 for e in events if e["event"] == "abort")  # logged only when it cut something


def test_every_trained_row_finds_its_pool_after_the_resume(async_run) -> None:
    second = async_run / "metrics" / "attempt-002.jsonl"
    restored = audit.read("pool_stats", second)
    assert len(restored) == 1  # the resumed manager looked for the checkpoint's pools once
    updates = audit.read("update", second)
    assert len(updates) == STEPS - 2
    for batch in updates:
        assert all(batch["known"]), batch["uid"]
        # Est trains on every response drawn, weighted: A = (r - pool mean) x w, with w from the estimator
        rows = zip(batch["score"], batch["pool_mean"], batch["weight"], batch["advantage"], strict=True)
        for score, mean, weight, adv in rows:
            assert adv == pytest.approx((score - mean) * weight, abs=1e-9)
        assert len(batch["uid"]) == 8 * BATCH  # Est's budget: n_avg = 8 responses a prompt on average
