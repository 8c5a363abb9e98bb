"""The run directory contract: creation, refusals, attempts, crash repair, metrics and checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from repro.errors import ReproError
from repro.rundir import MetricsWriter, RunDir, cell_name, read_attempt

CONFIG = {"model": {"name": "tiny", "lr": 1e-3}, "trainer": {"steps": 10, "seed": 1}, "tags": ["a", "b"]}
ARGV = ["repro", "run", "--method", "est"]


def fresh(tmp_path: Path, config: dict = CONFIG) -> RunDir:
    return RunDir.prepare(tmp_path / "run", config, ARGV)


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cell_name() -> None:
    assert cell_name("qwen2.5-math-1.5b", "seq-balance", "openr1", 3) == "qwen2.5-math-1.5b__seq-balance__openr1__s3"


# ---- prepare ----------------------------------------------------------------------------------


def test_prepare_creates_layout(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    assert run.path == tmp_path / "run"
    assert yaml.safe_load((run.path / "config.yaml").read_text()) == CONFIG
    assert run.config() == CONFIG
    command = json.loads((run.path / "command.json").read_text())
    assert command == {"argv": ARGV, "cwd": os.getcwd()}
    status = run.status()
    assert status["state"] == "pending" and status["attempts"] == []
    assert status["created"].endswith("+00:00")
    assert run.state == "pending"
    assert sorted(p.name for p in run.path.iterdir()) == [
        "checkpoints",
        "command.json",
        "config.yaml",
        "eval",
        "metrics",
        "status.json",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no staging sibling left behind


def test_prepare_accepts_existing_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    run = fresh(tmp_path)
    assert run.state == "pending"
    assert run.config() == CONFIG


def test_prepare_resumes_interrupted_run_with_same_config(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    run.begin_attempt()
    run.end_attempt("interrupted")
    again = RunDir.prepare(tmp_path / "run", {**CONFIG, "tags": ("a", "b")}, ARGV)  # tuple == list after YAML
    assert again.path == run.path
    assert again.state == "interrupted"
    assert len(again.status()["attempts"]) == 1


def test_prepare_refuses_finished_run_unless_overwrite(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    metrics = run.begin_attempt()
    with MetricsWriter(metrics) as writer:
        writer.log(1, {"loss": 0.5})
    run.end_attempt("finished")
    with pytest.raises(ReproError, match="already finished; use --overwrite to run it again") as info:
        fresh(tmp_path)
    assert "\n" not in str(info.value)
    assert str(run.path) in str(info.value)

    new = RunDir.prepare(run.path, CONFIG, ARGV, overwrite=True)
    assert new.state == "pending" and new.metrics_files() == []
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert len(aside) == 1
    assert json.loads((aside[0] / "status.json").read_text())["state"] == "finished"
    assert lines_of(aside[0] / "metrics" / "attempt-001.jsonl") == [{"step": 1, "data": {"loss": 0.5}}]


def test_overwrite_twice_keeps_both_old_runs(tmp_path: Path) -> None:
    fresh(tmp_path)
    RunDir.prepare(tmp_path / "run", CONFIG, ARGV, overwrite=True)
    RunDir.prepare(tmp_path / "run", CONFIG, ARGV, overwrite=True)
    assert len([p for p in tmp_path.iterdir() if ".replaced-" in p.name]) == 2


def test_prepare_names_differing_keys(tmp_path: Path) -> None:
    fresh(tmp_path)
    changed = {**CONFIG, "model": {"name": "tiny", "lr": 2e-3}}
    with pytest.raises(ReproError) as info:
        fresh(tmp_path, changed)
    message = str(info.value)
    assert "model.lr: 0.001 -> 0.002" in message
    assert "model.name" not in message
    assert "use --overwrite to start over or --run-dir for a new run" in message
    assert "\n" not in message


def test_prepare_names_at_most_three_keys(tmp_path: Path) -> None:
    fresh(tmp_path, {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1})
    with pytest.raises(ReproError) as info:
        fresh(tmp_path, {"a": 2, "b": 2, "c": 2, "d": 2, "f": 1})
    message = str(info.value)
    assert "a: 1 -> 2; b: 1 -> 2; c: 1 -> 2 (and 3 more)" in message
    assert "d: 1" not in message


def test_prepare_reports_added_key(tmp_path: Path) -> None:
    fresh(tmp_path)
    with pytest.raises(ReproError, match=r"trainer\.kl: <absent> -> 0\.1"):
        fresh(tmp_path, {**CONFIG, "trainer": {**CONFIG["trainer"], "kl": 0.1}})


def test_prepare_refuses_foreign_dir(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(
            ReproError, match=r"is not a repro run directory \(no status.json\); pass another --run-dir"
        ):
            RunDir.prepare(tmp_path / "run", CONFIG, ARGV, overwrite=overwrite)
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"


def test_prepare_refuses_file(tmp_path: Path) -> None:
    (tmp_path / "run").write_text("x")
    with pytest.raises(ReproError, match="is a file, not a run directory"):
        fresh(tmp_path)


def test_prepare_refuses_corrupt_status(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    (run.path / "status.json").write_text('{"state": "runn')
    with pytest.raises(ReproError, match=r"half-written \(status.json is unreadable or corrupt\); use --overwrite"):
        fresh(tmp_path)
    new = RunDir.prepare(run.path, CONFIG, ARGV, overwrite=True)  # --overwrite moves it aside
    assert new.state == "pending"
    aside = next(p for p in tmp_path.iterdir() if ".replaced-" in p.name)
    assert (aside / "status.json").read_text() == '{"state": "runn'


def test_prepare_refuses_missing_config(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    (run.path / "config.yaml").unlink()
    with pytest.raises(ReproError, match=r"half-written \(config.yaml is missing\)"):
        fresh(tmp_path)


# ---- attempts and locking ---------------------------------------------------------------------


def test_attempts_are_numbered_and_recorded(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    first = run.begin_attempt(launcher="slurm", job_id="1234")
    assert first == run.path / "metrics" / "attempt-001.jsonl"
    assert not first.exists()
    assert run.state == "running"
    run.set_attempt(resumed_from_step=None, note="x")
    run.end_attempt("failed", error="CUDA OOM")
    second = run.begin_attempt()
    assert second.name == "attempt-002.jsonl"
    run.set_attempt(resumed_from_step=40)
    run.end_attempt("finished")

    status = run.status()
    assert status["state"] == "finished" and run.state == "finished"
    a1, a2 = status["attempts"]
    assert (a1["n"], a1["state"], a1["error"], a1["launcher"], a1["job_id"], a1["note"]) == (
        1,
        "failed",
        "CUDA OOM",
        "slurm",
        "1234",
        "x",
    )
    assert (a2["n"], a2["state"], a2["error"], a2["resumed_from_step"], a2["launcher"]) == (
        2,
        "finished",
        None,
        40,
        "local",
    )
    assert a1["pid"] == os.getpid() and a1["host"] and a1["started"] and a1["ended"]
    assert "repaired" not in a2


def test_attempt_number_never_reuses_an_existing_metrics_file(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    (run.metrics_dir / "attempt-003.jsonl").write_text('{"step": 1, "data": {}}\n')
    assert run.begin_attempt().name == "attempt-004.jsonl"


def test_end_attempt_rejects_unknown_state(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    run.begin_attempt()
    with pytest.raises(ValueError, match="end state"):
        run.end_attempt("done")


def test_second_holder_in_same_process_is_refused(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    run.begin_attempt()
    with pytest.raises(ReproError, match=f"already running \\(pid {os.getpid()}\\)"):
        RunDir(run.path).begin_attempt()
    with pytest.raises(ReproError, match=f"already running \\(pid {os.getpid()}\\)"):
        fresh(tmp_path)
    run.end_attempt("interrupted")
    assert RunDir(run.path).begin_attempt().name == "attempt-002.jsonl"


def test_lock_held_by_live_child_then_killed(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    script = textwrap.dedent(
        f"""
        import sys
        from repro.rundir import RunDir
        RunDir({str(run.path)!r}).begin_attempt(launcher="child")
        print("ready", flush=True)
        sys.stdin.read()  # holds the lock until killed, however long the checks below take (not a fixed sleep)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert run.state == "running"
        with pytest.raises(ReproError, match=f"already running \\(pid {child.pid}\\)"):
            fresh(tmp_path)
        with pytest.raises(ReproError, match=f"already running \\(pid {child.pid}\\)"):
            RunDir.prepare(run.path, CONFIG, ARGV, overwrite=True)  # never moves a live run aside
        assert run.path.is_dir() and not [p for p in tmp_path.iterdir() if ".replaced-" in p.name]
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
    assert run.status()["state"] == "running"  # the file still says so ...
    assert run.state == "interrupted"  # ... but nobody holds the lock
    resumed = fresh(tmp_path)
    assert resumed.begin_attempt().name == "attempt-002.jsonl"
    attempts = resumed.status()["attempts"]
    assert [(a["launcher"], a["state"]) for a in attempts] == [("child", "interrupted"), ("local", "running")]
    assert attempts[0]["pid"] == child.pid


def test_torn_tail_is_truncated_and_recorded(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    path = run.begin_attempt()
    with MetricsWriter(path) as writer:
        writer.log(1, {"loss": 1.0})
        writer.log(2, {"loss": 0.9})
    good = path.read_bytes()
    torn = b'{"step": 3, "data": {"lo'
    with open(path, "ab") as handle:
        handle.write(torn)
    run.end_attempt("interrupted")

    run.begin_attempt()
    assert path.read_bytes() == good
    assert run.status()["attempts"][1]["repaired"] == [{"file": "attempt-001.jsonl", "bytes": len(torn)}]
    assert run.read_metrics().corrupt == 0


def test_terminated_garbage_last_line_is_truncated(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    path = run.metrics_dir / "attempt-001.jsonl"
    path.write_bytes(b'{"step": 1, "data": {}}\n\x00\x00\x00\n')
    run.begin_attempt()
    assert path.read_bytes() == b'{"step": 1, "data": {}}\n'
    assert run.status()["attempts"][0]["repaired"] == [{"file": "attempt-001.jsonl", "bytes": 4}]


def test_unterminated_but_whole_last_record_is_kept(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    path = run.metrics_dir / "attempt-001.jsonl"
    path.write_bytes(b'{"step": 1, "data": {}}\n{"step": 2, "data": {"a": 1}}')
    run.begin_attempt()
    assert path.read_bytes() == b'{"step": 1, "data": {}}\n{"step": 2, "data": {"a": 1}}\n'
    assert run.status()["attempts"][0]["repaired"] == [{"file": "attempt-001.jsonl", "bytes": 0, "newline_added": True}]
    assert run.logged_steps() == {1, 2}


# ---- metrics ----------------------------------------------------------------------------------


def test_read_metrics_merges_attempts(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    m = run.metrics_dir
    (m / "attempt-001.jsonl").write_text(
        '{"step": 1, "data": {"loss": 1.0}}\n'
        "not json\n"
        '{"step": 2, "data": {"loss": 0.8}}\n'
        '{"step": "3", "data": {}}\n'
        '{"step": 3, "data": {"loss": 0.7}}\n'
    )
    (m / "attempt-002.jsonl").write_text('{"step": 3, "data": {"loss": 0.6}}\n{"step": 4, "data": {"loss": 0.5}}\n')
    (m / "attempt-010.jsonl").write_text('{"step": 4, "data": {"loss": 0.4}}\n{"data": {}}\n')
    (m / "notes.txt").write_text("ignored")
    assert [p.name for p in run.metrics_files()] == ["attempt-001.jsonl", "attempt-002.jsonl", "attempt-010.jsonl"]
    read = run.read_metrics()
    assert read.by_step == {1: {"loss": 1.0}, 2: {"loss": 0.8}, 3: {"loss": 0.6}, 4: {"loss": 0.4}}
    assert (read.lines, read.corrupt, read.duplicates) == (9, 3, 2)
    assert run.logged_steps() == {1, 2, 3, 4}


def test_read_metrics_of_empty_run(tmp_path: Path) -> None:
    read = fresh(tmp_path).read_metrics()
    assert (read.by_step, read.lines, read.corrupt, read.duplicates) == ({}, 0, 0, 0)


def test_metrics_writer_line_format(tmp_path: Path) -> None:
    path = tmp_path / "m" / "attempt-001.jsonl"
    with MetricsWriter(path) as writer:
        writer.log(1, {"loss": 0.25, "acc": 1})
        writer.log(np.int64(2), {"loss": np.float32(0.5), "n": np.int64(7), "flag": np.bool_(True)})
        writer.log(3, {"nan": float("nan"), "inf": np.float64("inf"), "none": None, "arr": np.array(1.5)})
    raw = path.read_text()
    assert raw.endswith("\n") and raw.count("\n") == 3
    records = lines_of(path)
    assert all(set(r) == {"step", "data"} for r in records)
    assert records[0] == {"step": 1, "data": {"loss": 0.25, "acc": 1}}
    assert records[1] == {"step": 2, "data": {"loss": 0.5, "n": 7, "flag": 1}}
    assert records[2] == {"step": 3, "data": {"nan": None, "inf": None, "none": None, "arr": 1.5}}
    assert "NaN" not in raw and "Infinity" not in raw
    # append mode: a second writer never truncates what is there
    with MetricsWriter(path) as writer:
        writer.log(4, {"loss": 0.1})
    assert [r["step"] for r in lines_of(path)] == [1, 2, 3, 4]


def test_metrics_writer_rejects_non_numbers(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path / "a.jsonl")
    with pytest.raises(TypeError, match="'name'"):
        writer.log(1, {"name": "x"})
    with pytest.raises(TypeError, match="step"):
        writer.log(1.5, {})  # type: ignore[arg-type]
    writer.close()
    with pytest.raises(ValueError, match="after close"):
        writer.log(1, {})
    assert (tmp_path / "a.jsonl").read_text() == ""


# ---- checkpoints ------------------------------------------------------------------------------


def save(run: RunDir, step: int) -> Path:
    staging = run.staging_checkpoint_dir(step)
    assert staging.name == f".staging-global_step_{step}-{os.getpid()}" and list(staging.iterdir()) == []
    (staging / "model.pt").write_text(f"weights {step}")
    return run.commit_checkpoint(step, staging)


def test_commit_and_latest(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    assert run.latest_checkpoint() is None
    final = save(run, 5)
    assert final == run.checkpoint_dir(5) == run.path / "checkpoints" / "global_step_5"
    assert (final / "COMPLETE").is_file() and (final / "model.pt").read_text() == "weights 5"
    assert (run.checkpoints_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "5"
    save(run, 10)
    assert run.latest_checkpoint() == (10, run.checkpoint_dir(10))
    assert not [p for p in run.checkpoints_dir.iterdir() if p.name.startswith(".")]


def test_commit_replaces_existing_step(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    save(run, 5)
    staging = run.staging_checkpoint_dir(5)
    (staging / "model.pt").write_text("retrained")
    run.commit_checkpoint(5, staging)
    assert (run.checkpoint_dir(5) / "model.pt").read_text() == "retrained"
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == [
        "global_step_5",
        "latest_checkpointed_iteration.txt",
    ]


def test_staging_dir_is_emptied(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    (run.staging_checkpoint_dir(3) / "junk").write_text("old")
    assert list(run.staging_checkpoint_dir(3).iterdir()) == []


def test_latest_falls_back_when_pointer_is_stale(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    save(run, 4)
    save(run, 8)
    (run.checkpoints_dir / "latest_checkpointed_iteration.txt").write_text("12\n")  # dir 12 never made it
    (run.checkpoints_dir / "global_step_16").mkdir()  # incomplete: no COMPLETE marker
    (run.checkpoints_dir / "global_step_16" / "model.pt").write_text("half")
    assert run.latest_checkpoint() == (8, run.checkpoint_dir(8))
    (run.checkpoints_dir / "latest_checkpointed_iteration.txt").unlink()
    assert run.latest_checkpoint() == (8, run.checkpoint_dir(8))


def test_prune_keeps_multiples_latest_and_newest(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    for step in range(1, 8):
        save(run, step)
    (run.checkpoints_dir / "global_step_0").mkdir()  # incomplete: left alone
    stale = run.checkpoints_dir / ".staging-global_step_9-999999999"
    stale.mkdir()
    mine = run.staging_checkpoint_dir(8)  # this process's: still in use

    deleted = run.prune_checkpoints(keep_every=3, keep_last=2)
    assert deleted == [1, 2, 4, 5]
    assert sorted(p.name for p in run.checkpoints_dir.iterdir() if p.is_dir()) == sorted(
        ["global_step_0", "global_step_3", "global_step_6", "global_step_7", mine.name]
    )
    assert not stale.exists()
    assert run.latest_checkpoint() == (7, run.checkpoint_dir(7))


def test_prune_never_deletes_the_pointed_checkpoint(tmp_path: Path) -> None:
    run = fresh(tmp_path)
    for step in (1, 2, 3):
        save(run, step)
    (run.checkpoints_dir / "latest_checkpointed_iteration.txt").write_text("2\n")
    assert run.prune_checkpoints(keep_every=100, keep_last=1) == [1]
    assert run.latest_checkpoint() == (2, run.checkpoint_dir(2))
    assert run.checkpoint_dir(3).is_dir()


def test_read_metrics_merges_the_verl_sampler_file_into_the_same_steps(tmp_path: Path) -> None:
    """A verl attempt logs verl's metrics to attempt-NNN.jsonl and the plugin's sampler metrics beside it."""
    run = fresh(tmp_path)
    m = run.metrics_dir
    (m / "attempt-001.jsonl").write_text(
        '{"step": 0, "data": {"val/acc": 0.1}}\n'
        '{"step": 1, "data": {"loss": 1.0}}\n'
        '{"step": 2, "data": {"loss": 0.9}}\n'
    )
    # step 3 was sampled but the attempt died before verl logged it: not a logged step
    (m / "attempt-001.sampler.jsonl").write_text(
        '{"step": 1, "data": {"sampler/responses_total": 64, "est/alloc_max": 12}}\n'
        '{"step": 2, "data": {"sampler/responses_total": 72, "dapo/num_gen_batches": 2}}\n'
        '{"step": 3, "data": {"sampler/responses_total": 80}}\n'
        '{"step": 4, "data": {"sampler/resp'
    )
    (m / "attempt-002.jsonl").write_text('{"step": 3, "data": {"loss": 0.7}}\n')
    (m / "attempt-002.sampler.jsonl").write_text('{"step": 3, "data": {"sampler/responses_total": 88}}\n')
    assert [p.name for p in run.metrics_files()] == ["attempt-001.jsonl", "attempt-002.jsonl"]
    read = run.read_metrics()
    assert read.by_step == {
        0: {"val/acc": 0.1},
        1: {"loss": 1.0, "sampler/responses_total": 64, "est/alloc_max": 12},
        2: {"loss": 0.9, "sampler/responses_total": 72, "dapo/num_gen_batches": 2},
        3: {"loss": 0.7, "sampler/responses_total": 88},
    }
    assert (read.lines, read.corrupt, read.duplicates) == (9, 1, 0)  # the torn sampler tail is corrupt
    assert run.logged_steps() == {0, 1, 2, 3}


def test_a_batch_sampled_before_an_interruption_brings_its_sampler_line_to_the_attempt_that_trains_it(
    tmp_path: Path,
) -> None:
    """verl's async trainer checkpoints the batches it sampled ahead; the resumed attempt trains them without
    sampling them again, so their sampler lines sit in attempt 1 and verl's lines in attempt 2."""
    run = fresh(tmp_path)
    m = run.metrics_dir
    (m / "attempt-001.jsonl").write_text('{"step": 1, "data": {"loss": 1.0}}\n{"step": 2, "data": {"loss": 0.9}}\n')
    (m / "attempt-001.sampler.jsonl").write_text(
        '{"step": 1, "data": {"sampler/prompts": 16}}\n'
        '{"step": 3, "data": {"sampler/prompts": 8, "est/p_hat_mean": 0.3}}\n'
        '{"step": 4, "data": {"sampler/prompts": 8, "est/p_hat_mean": 0.4}}\n'
    )
    # attempt 2 trains steps 3 and 4; it sampled step 4's batch again (the first one was cut by the kill)
    (m / "attempt-002.jsonl").write_text('{"step": 3, "data": {"loss": 0.7}}\n{"step": 4, "data": {"loss": 0.6}}\n')
    (m / "attempt-002.sampler.jsonl").write_text('{"step": 4, "data": {"sampler/prompts": 8, "est/p_hat_mean": 0.5}}\n')
    read = run.read_metrics()
    assert read.by_step == {
        1: {"loss": 1.0, "sampler/prompts": 16},
        2: {"loss": 0.9},  # trained from step 1's double submission: no line of its own
        3: {"loss": 0.7, "sampler/prompts": 8, "est/p_hat_mean": 0.3},  # carried from attempt 1
        4: {"loss": 0.6, "sampler/prompts": 8, "est/p_hat_mean": 0.5},  # its own line wins
    }
    # a single attempt read alone keeps its own lines only
    assert dict(read_attempt(m / "attempt-002.jsonl")[0])[3] == {"loss": 0.7}
