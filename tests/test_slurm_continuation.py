"""A cell longer than its Slurm time limit spans allocations by itself: the sbatch script's USR1 / TERM traps
(run by bash against a fake trainer and a fake scontrol), the trainers' stop at a step boundary, the
allocation count and the steps lost, and one tiny-arith cell on the real one-node Slurm of tests/clusters.py
that is warned, stops, is requeued and finishes, equal to an uninterrupted run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from repro.launch.allocations import (
    STOP_HONOURED,
    STOP_REQUEST,
    STOPPED_EXIT,
    allocation_ends,
    allocations,
    request_stop,
    stop_request,
)
from repro.launch.attempt import run_attempt
from repro.launch.jobs import job_records
from repro.launch.plan import CellPlan, CpuOptions
from repro.launch.slurm import SlurmOptions, SlurmScheduler, render_script
from repro.node_check import node_check_argv
from repro.rundir import RunDir, cell_name
from repro.rundir.attempts import first_logged_step, last_logged_step
from repro.rundir.pause import PAUSE_ENV, pause_file, release
from repro.sweep import load_sweep
from repro.sweep_submit import submit_sweep

ROOT = Path(__file__).resolve().parents[1]


# ---- the sbatch script -------------------------------------------------------------------------------


def _plan(run_dir: Path, argv: list[str], gpu: object | None = None) -> CellPlan:
    return CellPlan(None, "cell", run_dir, {}, argv, gpu)  # type: ignore[arg-type]


def _script(tmp_path: Path, plan: CellPlan, options: SlurmOptions) -> Path:
    path = tmp_path / "job.sbatch"
    path.write_text(
        render_script(plan, options, sweep_name="s", project_dir=tmp_path, python_bin=Path(sys.executable).parent)
    )
    return path


def test_the_script_asks_for_a_warning_requeues_and_bounds_its_allocations(tmp_path) -> None:
    run = tmp_path / "run"
    cpu = _script(tmp_path, _plan(run, ["python", "-m", "repro.cli", "run"]), SlurmOptions())
    text = cpu.read_text()
    for line in ("#SBATCH --signal=B:USR1@60", "#SBATCH --requeue", "#SBATCH --open-mode=append"):
        assert line in text.splitlines(), line
    assert "trap request_stop USR1" in text and "trap on_term TERM" in text
    assert "max_allocations=4" in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert f"stop_file={run / STOP_REQUEST}" in text
    assert "    run &\ncell=$!" in text  # the cell in the background, so the traps run while it trains
    assert subprocess.run(["bash", "-n", str(cpu)]).returncode == 0
    # a VerlRun's fields the script reads (its node check as repro.cell_config.verl_run builds it)
    gpu = SimpleNamespace(nnodes=2, gpus_per_node=8, overrides=[], node_check=node_check_argv(run, [], 8))
    multi = _script(
        tmp_path, _plan(run, ["python", "-m", "repro.launch.attempt"], gpu), SlurmOptions(max_allocations=2)
    )
    text = multi.read_text()
    assert "#SBATCH --signal=B:USR1@900" in text and "max_allocations=2" in text
    assert text.index("trap request_stop USR1") < text.index("ray start --head")  # warned during Ray's start too
    # every node's stack is checked before Ray starts: one srun task per node
    check = next(line for line in text.splitlines() if "repro.node_check" in line)
    assert check.startswith('srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --overlap python -m')
    assert text.index(check) < text.index("ray start --head")
    assert subprocess.run(["bash", "-n", str(multi)]).returncode == 0
    short = _script(tmp_path, _plan(run, ["python"], gpu), SlurmOptions(time="20:00"))
    assert "#SBATCH --signal=B:USR1@600" in short.read_text()  # a default margin stays under half the limit


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (SlurmOptions(signal_margin=0), "signal_margin must be a positive integer"),
        (SlurmOptions(time="1", signal_margin=60), "not less than the time limit"),
        (SlurmOptions(signal_margin=70000), "over Slurm's 65535 s"),
        (SlurmOptions(max_allocations=0), "max_allocations must be a positive integer"),
    ],
)
def test_bad_continuation_options(options: SlurmOptions, fragment: str) -> None:
    from repro.errors import ReproError

    with pytest.raises(ReproError, match=fragment):
        options.check()


FAKE_TRAINER = """
import os, pathlib, signal, sys, time
run, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
(run / "started").write_text("1")
if mode == "killed":  # the time limit's TERM reached the trainer, and the script's was lost
    os.kill(os.getpid(), signal.SIGTERM)
for _ in range(2400):  # a guard only: every test ends the fake trainer by a signal or a request
    request = run / ".stop-request.json"
    if request.exists() and not (run / "seen-request.json").exists():
        (run / "seen.tmp").write_text(request.read_text())  # what the trainer saw, for the test: whole or not
        os.replace(run / "seen.tmp", run / "seen-request.json")  # at all, as a TERM may come right after it
    if mode == "honour" and request.exists():
        sys.exit(75)
    if mode == "finish" and request.exists():
        sys.exit(0)  # the last step ended as the warning came: the run is finished, nothing to stop
    time.sleep(0.05)
sys.exit(3)
"""


def _bash_job(
    tmp_path: Path,
    mode: str,
    restart: int,
    send,
    slurm_says: str = "JobState=RUNNING Reason=None",
    on_requeue: str = "exit 0",
) -> tuple[int, str, str, dict | None]:
    """Run the rendered script with bash as Slurm would (a fake `scontrol` on PATH that answers `show job` with
    `slurm_says`, or with nothing when it is empty: slurmctld not answering, and runs `on_requeue` for a
    requeue), deliver `send`'s signals once the fake trainer runs; (exit code, output, scontrol requeue calls,
    stop request seen)."""
    run = tmp_path / "run"
    (run / "slurm").mkdir(parents=True, exist_ok=True)
    (run / "started").unlink(missing_ok=True)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    calls = tmp_path / "scontrol.calls"
    calls.unlink(missing_ok=True)
    (fake_bin / "scontrol").write_text(
        f'#!/bin/sh\nif [ "$1" = show ]; then [ -n "{slurm_says}" ] && echo "JobId=$3 {slurm_says}"; exit 0; fi\n'
        f'echo "$@" >> {calls}\n{on_requeue}\n'
    )
    (fake_bin / "scontrol").chmod(0o755)
    script = _script(tmp_path, _plan(run, ["python", "-c", FAKE_TRAINER, str(run), mode]), SlurmOptions())
    env = {
        **os.environ,
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "42",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_RESTART_COUNT": str(restart),
    }
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 30  # a guard: the signals are sent once the fake trainer says it runs
    while send and not (run / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen_file = run / "seen-request.json"
    seen_file.unlink(missing_ok=True)
    for what in send:
        if what == "USR1":  # --signal=B: the batch shell only
            os.kill(proc.pid, signal.SIGUSR1)
            # the next signal only once the trainer has seen the request (or has ended): an order, not a delay
            deadline = time.monotonic() + 120  # a guard against a hang, not a timing
            while not seen_file.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        else:  # scancel, preemption, the time limit: every process of the job
            os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    seen = json.loads(seen_file.read_text()) if seen_file.exists() else None
    return proc.returncode, out, calls.read_text() if calls.exists() else "", seen


def _ends(tmp_path: Path) -> list[tuple]:
    lines = (tmp_path / "run" / "slurm" / "allocations.jsonl").read_text().splitlines()
    return [(r["stage"], r["job_id"], r["allocation"], r["end"], r["requeued"]) for r in map(json.loads, lines)]


def test_usr1_asks_the_trainer_to_stop_and_requeues_the_same_job(tmp_path) -> None:
    code, out, calls, seen = _bash_job(tmp_path, "honour", restart=0, send=["USR1"])
    assert code == 0, out
    assert calls.strip() == "requeue 42"
    assert seen is not None and seen["job_id"] == "42" and seen["allocation"] == 1, seen
    assert "allocation 1 of at most 4" in out and "requeueing job 42 for allocation 2 of 4 (warning)" in out
    assert _ends(tmp_path) == [("train", "42", 1, "warning", True)]


@pytest.mark.parametrize(
    ("on_requeue", "slurm_says", "requeued"),
    [
        # what a real requeue does (seen on Slurm 22.05): slurmctld TERMs every process of the job at once, the
        # scontrol that asked included, which must still return its success
        ("kill -TERM 0; exit 0", "JobState=RUNNING Reason=None", True),
        # scontrol failed, but slurmctld counts the requeue: the job does come back
        ("exit 1", "JobState=REQUEUED Reason=None Restarts=1", True),
        ("exit 1", "JobState=RUNNING Reason=None Restarts=0", False),  # it really failed
    ],
)
def test_the_requeue_that_terms_the_job_is_recorded_as_a_requeue(tmp_path, on_requeue, slurm_says, requeued):
    code, out, calls, _ = _bash_job(tmp_path, "honour", restart=0, send=["USR1"], slurm_says=slurm_says,
                                    on_requeue=on_requeue)  # fmt: skip
    assert calls.strip() == "requeue 42", out
    assert _ends(tmp_path) == [("train", "42", 1, "warning", requeued)], out
    assert (code == 0) == requeued and ("scontrol requeue failed" in out) != requeued, out


def test_the_last_allocation_is_not_requeued(tmp_path) -> None:
    code, out, calls, _ = _bash_job(tmp_path, "honour", restart=3, send=["USR1"])
    assert (code, calls) == (STOPPED_EXIT, ""), out
    assert "allocation 4 was the last of 4" in out
    assert _ends(tmp_path) == [("train", "42", 4, "warning", False)]


def test_a_warning_the_finishing_cell_did_not_need_leaves_no_request(tmp_path) -> None:
    code, out, calls, seen = _bash_job(tmp_path, "finish", restart=0, send=["USR1"])
    assert seen is not None and (code, calls) == (0, ""), out
    assert not (tmp_path / "run" / STOP_REQUEST).exists()  # else a later attempt of this job would stop at once
    assert _ends(tmp_path) == [("train", "42", 1, "finished", False)]


def test_a_cancel_is_not_requeued(tmp_path) -> None:
    code, out, calls, _ = _bash_job(
        tmp_path, "honour", restart=0, send=["TERM"], slurm_says="JobState=COMPLETING Reason=None"
    )
    assert (code, calls) == (128 + signal.SIGTERM, ""), out
    assert not (tmp_path / "run" / STOP_REQUEST).exists()
    assert _ends(tmp_path) == [("train", "42", 1, "cancelled", False)]


@pytest.mark.parametrize(
    ("send", "slurm_says"),
    [
        (["TERM"], "JobState=COMPLETING Reason=TimeLimit"),  # the limit with no warning before it (a short job)
        (["USR1", "TERM"], "JobState=COMPLETING Reason=TimeLimit"),  # warned, the step outlasted the margin
        (["USR1", "TERM"], "JobState=TIMEOUT Reason=TimeLimit"),  # the state another Slurm version shows
        (["USR1", "TERM"], ""),  # warned, and slurmctld does not answer: a TERM after a warning is the limit
    ],
)
def test_the_time_limit_requeues_the_job_before_the_kill(tmp_path, send, slurm_says) -> None:
    code, out, calls, _ = _bash_job(tmp_path, "ignore", restart=0, send=send, slurm_says=slurm_says)
    assert (code, calls.strip()) == (0, "requeue 42"), out
    assert "the time limit" in out and "requeueing job 42 for allocation 2 of 4 (time limit)" in out
    assert _ends(tmp_path) == [("train", "42", 1, "time limit", True)]


@pytest.mark.parametrize(
    ("slurm_says", "requeued"),
    [("JobState=COMPLETING Reason=TimeLimit", True), ("JobState=TIMEOUT Reason=TimeLimit", True),
     ("JobState=RUNNING Reason=None", False), ("", False)],
)  # fmt: skip
def test_a_cell_ended_at_the_time_limit_is_requeued_even_if_the_scripts_term_was_lost(tmp_path, slurm_says, requeued):
    """Seen on the real Slurm: the limit and the warning landed together, the trainer died of the TERM, the
    script's USR1 trap ran and its TERM trap never did. The script asks slurmctld once the cell has ended."""
    code, out, calls, _ = _bash_job(tmp_path, "killed", restart=0, send=[], slurm_says=slurm_says)
    assert (code, calls.strip()) == ((0, "requeue 42") if requeued else (128 + signal.SIGTERM, "")), out
    end = ("train", "42", 1, "time limit", True) if requeued else ("train", "42", 1, "failed", False)
    assert _ends(tmp_path) == [end], out


def test_a_time_limit_in_the_last_allocation_leaves_the_run_interrupted(tmp_path) -> None:
    code, out, calls, _ = _bash_job(
        tmp_path, "ignore", restart=3, send=["TERM"], slurm_says="JobState=COMPLETING Reason=TimeLimit"
    )
    assert (code, calls) == (128 + signal.SIGTERM, ""), out
    assert "allocation 4 was the last of 4" in out
    assert _ends(tmp_path) == [("train", "42", 4, "time limit", False)]


def test_a_term_without_a_warning_that_slurm_cannot_explain_is_not_requeued(tmp_path) -> None:
    code, out, calls, _ = _bash_job(tmp_path, "ignore", restart=0, send=["TERM"], slurm_says="")
    assert (code, calls) == (128 + signal.SIGTERM, ""), out
    assert _ends(tmp_path) == [("train", "42", 1, "cancelled", False)]


def test_an_allocation_of_a_finished_run_ends_at_once_with_success(tmp_path) -> None:
    """The time limit can land after the last step was recorded; the job is then requeued so that it ends
    COMPLETED (an afterok evaluation waits for that), and the next allocation must not start the trainer."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "attempts": []}))
    code, out, calls, _ = _bash_job(tmp_path, "ignore", restart=1, send=[])
    assert (code, calls) == (0, ""), out
    assert "the run is finished already" in out and not (run / "started").exists()
    assert _ends(tmp_path) == [("train", "42", 2, "finished", False)]


# ---- attempts, allocations, steps lost ---------------------------------------------------------------


def _metrics(run: Path, n: int, steps: range) -> None:
    (run / "metrics").mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": s, "data": {"x": float(s)}}) for s in steps]
    (run / "metrics" / f"attempt-{n:03d}.jsonl").write_text("".join(line + "\n" for line in lines))


def _status(run: Path, attempts: list[dict]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "status.json").write_text(json.dumps({"state": "finished", "attempts": attempts}))


def test_allocations_counts_attempts_and_the_steps_trained_twice(tmp_path) -> None:
    assert allocations(tmp_path / "missing") == (0, 0)
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "status.json").write_text("{not json")
    assert allocations(tmp_path / "corrupt") == (0, 0)
    run = tmp_path / "run"
    # 1: from scratch (the CPU trainer records None), logged 1-7 and was killed: no last_logged_step
    # 2: died before loading a checkpoint; 3: resumed from 5, stopped on request at 9 (recorded);
    # 4: resumed from 9 and finished
    _status(run, [
        {"n": 1, "state": "interrupted", "resumed_from_step": None},
        {"n": 2, "state": "failed", "resumed_from_step": None},
        {"n": 3, "state": "interrupted", "resumed_from_step": 5, "last_logged_step": 9},
        {"n": 4, "state": "finished", "resumed_from_step": 9, "last_logged_step": 12},
    ])  # fmt: skip
    _metrics(run, 1, range(1, 8))
    _metrics(run, 3, range(6, 10))
    _metrics(run, 4, range(10, 13))
    assert allocations(run) == (4, 2)  # steps 6 and 7 were trained twice; the stop at 9 lost nothing
    (run / "metrics" / "attempt-001.jsonl").unlink()  # a missing file is nothing logged
    assert allocations(run) == (4, 0)


def test_first_and_last_logged_step_read_only_the_ends(tmp_path) -> None:
    file = tmp_path / "attempt-001.jsonl"
    assert last_logged_step(file) is None and first_logged_step(file) is None
    big = "y" * 100_000  # a line longer than one read from either end
    lines = [json.dumps({"step": s, "data": {"big": big}}) for s in (3, 4, 5)]
    file.write_text("\n".join(lines) + "\n" + lines[0][:50])  # a torn final line
    assert (first_logged_step(file), last_logged_step(file)) == (3, 5)
    file.write_text("")
    assert last_logged_step(file) is None


FAKE_VERL = """
import json, pathlib, sys
run = pathlib.Path(sys.argv[1])
from repro.launch.allocations import honour, request_stop, stop_request
request_stop(run, "test", job_id="42")  # the allocation's warning, while the trainer trains
assert stop_request(run) is not None
(run / "metrics" / "attempt-002.jsonl").write_text(json.dumps({"step": 7, "data": {}}) + "\\n")
honour(run, 7, saved_now=True)
"""


def test_an_attempt_whose_trainer_honoured_the_request_exits_75(tmp_path, monkeypatch) -> None:
    run = RunDir.prepare(tmp_path / "run", {"a": 1}, ["repro", "run"])
    monkeypatch.setenv("REPRO_LAUNCHER", "slurm")
    monkeypatch.setenv("REPRO_JOB_ID", "42")
    (run.path / "checkpoints" / "global_step_6").mkdir(parents=True)
    (run.path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("6\n")
    request_stop(run.path, "test", job_id="7")  # another job's: stale, dropped as the attempt begins
    assert run_attempt(run, [sys.executable, "-c", "pass"]) == 0
    assert stop_request(run.path) is None
    assert run_attempt(run, [sys.executable, "-c", FAKE_VERL, str(run.path)]) == STOPPED_EXIT
    last = run.status()["attempts"][-1]
    assert last["state"] == "interrupted" and last["error"] == "allocation ending: checkpoint at step 7, 0 steps lost"
    assert (last["resumed_from_step"], last["last_logged_step"]) == (6, 7)
    assert not (run.path / STOP_REQUEST).exists() and not (run.path / STOP_HONOURED).exists()


def _wrapper(run: Path, env: dict) -> subprocess.Popen:
    """`repro.launch.attempt` around a trainer that only leaves a mark: what a job script starts."""
    trainer = [sys.executable, "-c", f"open({str(run / 'trainer-ran')!r}, 'w')"]
    return subprocess.Popen([sys.executable, "-m", "repro.launch.attempt", str(run), "--", *trainer], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def test_an_attempt_ended_or_warned_while_it_starts_never_starts_its_trainer(tmp_path) -> None:
    """The wrapper's start (slimming old saves can take minutes on a big model) is a moment the allocation can end
    in: a TERM there is recorded and no trainer starts; a warning found there stops it with exit 75."""
    run = RunDir.prepare(tmp_path / "run", {"a": 1}, ["repro", "run"]).path
    env = {**os.environ, "REPRO_LAUNCHER": "slurm", "REPRO_JOB_ID": "42", "REPRO_ALLOCATION": "3", PAUSE_ENV: "start"}
    proc = _wrapper(run, env)
    _wait_for("paused while starting", pause_file(run, "start").exists, [], run)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out
    first = RunDir(run).status()["attempts"][-1]
    assert (first["state"], first["moment"], first["allocation"]) == ("interrupted", "starting", 3), first
    assert first["error"] == "stopped by signal 15 while starting" and not (run / "trainer-ran").exists()
    request_stop(run, "allocation 4 of slurm job 42 ends in about 10 s", job_id="42")  # warned while starting
    proc = _wrapper(run, {**env, "REPRO_ALLOCATION": "4"})
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == STOPPED_EXIT and not (run / "trainer-ran").exists(), out
    second = RunDir(run).status()["attempts"][-1]
    assert (second["moment"], second["error"]) == ("starting", "allocation ending: checkpoint at step 0, 0 steps lost")
    assert stop_request(run) is None
    proc = _wrapper(run, {**env, "REPRO_ALLOCATION": "5"})
    assert proc.wait(timeout=60) == 0 and (run / "trainer-ran").exists()
    assert allocation_ends(run) == ["1: interrupted while starting", "2: interrupted while starting", "3: finished"]


def test_allocation_ends_pair_the_scripts_record_with_each_attempts_moment(tmp_path) -> None:
    run = tmp_path / "run"
    _status(run, [
        {"n": 1, "job_id": "9", "allocation": 1, "state": "interrupted", "resumed_from_step": None},
        {"n": 2, "job_id": "9", "allocation": 2, "state": "interrupted", "moment": "saving step 4",
         "last_logged_step": 3},
        {"n": 3, "job_id": "9", "allocation": 3, "state": "interrupted", "moment": "after step 6",
         "last_logged_step": 6},
        {"n": 4, "job_id": "9", "allocation": 4, "state": "finished", "moment": "finished", "last_logged_step": 8},
    ])  # fmt: skip
    lines = [
        {"stage": "train", "job_id": "9", "allocation": 1, "end": "time limit", "requeued": True},
        {"stage": "train", "job_id": "9", "allocation": 2, "end": "time limit", "requeued": True},
        {"stage": "train", "job_id": "9", "allocation": 3, "end": "warning", "requeued": True},
        {"stage": "train", "job_id": "9", "allocation": 4, "end": "time limit", "requeued": False},
        {"stage": "eval", "job_id": "10", "allocation": 1, "end": "cancelled", "requeued": False},
    ]
    (run / "slurm").mkdir()
    text = "".join(json.dumps(x) + "\n" for x in lines)
    (run / "slurm" / "allocations.jsonl").write_text(text + '{"stage": "train", "job_id": "9", "allo')  # torn
    assert allocation_ends(run) == [
        "1: time limit before its first step, requeued",
        "2: time limit while saving step 4, requeued",
        "3: warning after step 6, requeued",
        "4: time limit after the last step",
        "eval 1: cancelled",
    ]
    (run / "slurm" / "allocations.jsonl").unlink()  # another launcher: the attempts alone
    rest = ["2: interrupted while saving step 4", "3: interrupted after step 6", "4: finished"]
    assert allocation_ends(run)[1:] == rest
    assert allocation_ends(tmp_path / "missing") == []


def test_a_ray_cells_allocation_ends_come_from_the_deadline_wrappers_log(tmp_path) -> None:
    run = tmp_path / "run"
    _status(run, [
        {"n": 1, "job_id": "r-1", "allocation": 1, "state": "interrupted", "moment": "step 3"},
        {"n": 2, "job_id": "r-2", "allocation": 2, "state": "interrupted", "moment": "after step 5",
         "last_logged_step": 5},
        {"n": 3, "job_id": "r-3", "allocation": 3, "state": "interrupted", "moment": "step 7"},
    ])  # fmt: skip
    lines = [  # as repro.launch.deadline writes them (fields trimmed)
        {"job_id": "r-1", "allocation": 1, "max_allocations": 3, "ended_by": "deadline", "exit": 75},
        {"job_id": "r-2", "allocation": 2, "max_allocations": 3, "ended_by": "stopped on request", "exit": 75},
        {"job_id": "r-3", "allocation": 3, "max_allocations": 3, "ended_by": "deadline", "exit": 75},
    ]
    (run / "deadlines.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"job_id": "r-4", "al')
    assert allocation_ends(run) == [
        "1: time limit during step 3, continued",
        "2: warning after step 5, continued",
        "3: time limit during step 7",  # the last allowed job: the cell stays interrupted
    ]


def test_verls_trainer_saves_and_ends_its_loop_at_the_step_a_stop_is_requested(tmp_path) -> None:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import get_trainer_cls

    from repro.verl_plugin.config_builder import TRAINER_MODE
    from repro.verl_plugin.stop_trainer import StopAtBoundaryTrainer

    assert get_trainer_cls(TRAINER_MODE) is StopAtBoundaryTrainer  # registered through verl's registry
    run = tmp_path / "run"
    run.mkdir()
    saves: list[int] = []
    trainer = object.__new__(StopAtBoundaryTrainer)  # its hooks only: no Ray, no workers
    trainer.config = OmegaConf.create({"trainer": {"save_freq": 5, "default_local_dir": str(run / "checkpoints")}})
    trainer.run_dir, trainer.stopped_at, trainer.timing_raw = run, None, {}
    trainer.total_training_steps = 20
    trainer.checkpoint_manager = SimpleNamespace(update_weights=lambda step: None)
    trainer._save_checkpoint = lambda: saves.append(trainer.global_steps)
    trainer.global_steps = 3
    trainer.on_step_end()
    assert (saves, trainer.total_training_steps) == ([], 20)  # no request: verl's own loop
    request_stop(run, "test")
    trainer.global_steps = 5  # a save_freq step: the loop saved it already
    trainer.on_step_end()
    assert (saves, trainer.total_training_steps, trainer.stopped_at) == ([], 5, (5, False))
    trainer.on_train_end()
    assert json.loads((run / STOP_HONOURED).read_text())["step"] == 5 and stop_request(run) is None
    trainer.stopped_at, trainer.total_training_steps, trainer.global_steps = None, 20, 7
    request_stop(run, "test")
    trainer.on_step_end()
    assert (saves, trainer.total_training_steps, trainer.stopped_at) == ([7], 7, (7, True))
    assert "save_checkpoint" in trainer.timing_raw  # timed as verl's own save is
    # warned while verl was starting: fit has counted step 8 (restored 7) and calls on_train_begin; the loop must
    # not run (its condition global_steps <= total_training_steps fails), nothing is saved, the record says 7
    (run / STOP_HONOURED).unlink()
    trainer.stopped_at, trainer.total_training_steps, trainer.global_steps = None, 20, 8
    request_stop(run, "test")
    trainer.on_train_begin()
    assert (saves, trainer.total_training_steps, trainer.stopped_at) == ([7], 7, (7, False))
    assert not trainer.global_steps <= trainer.total_training_steps
    trainer.on_train_end()
    assert json.loads((run / STOP_HONOURED).read_text())["step"] == 7 and stop_request(run) is None
    trainer.stopped_at, trainer.total_training_steps = None, 20
    trainer.on_train_begin()  # no request: verl's own start (the sync trainer's is a no-op)
    assert (trainer.total_training_steps, trainer.stopped_at) == (20, None)


# ---- the real Slurm ----------------------------------------------------------------------------------


def _steps(run: Path) -> list[int]:
    return sorted(
        json.loads(line)["step"]
        for f in (run / "metrics").glob("attempt-*.jsonl")
        for line in f.read_text().splitlines()
    )


def _show(job_id: str) -> str:
    return subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout


def _wait_for(what: str, ready, job_ids: list[str], run: Path, seconds: float = 300) -> None:
    """Wait until `ready()`: a generous guard, not a timing the test depends on (the moments are the code's own)."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            logs = "".join(p.read_text()[-1500:] for p in sorted((run / "slurm").glob("*.out")))
            raise AssertionError(f"never {what}: " + " | ".join(_show(j)[:400] for j in job_ids) + "\n" + logs)
        time.sleep(0.1)


SIGNAL_MARGIN = 20  # the warning of a 1-minute limit comes 40 s into the allocation


def _restarts(job_id: str) -> int:
    match = re.search(r"\bRestarts=(\d+)", _show(job_id))
    return int(match.group(1)) if match else -1


def _time_limit_now(job_id: str, run: Path) -> None:
    """Slurm's own time limit, now: slurmctld ends the job TIMEOUT at its next limit check (every 30 s), with
    the TERM, the KillWait and the job state Reason=TimeLimit of a real --time running out. Moving the end
    sets the job's TimeLimit (to a minute, rounded up) for its later allocations too, so once the job script
    has requeued it the limit is put back before the next allocation can be warned for it: a requeued job
    waits cred_expire (10 s) to start, and its warning would come 40 s after that (SIGNAL_MARGIN)."""
    limit = re.search(r"\bTimeLimit=(\S+)", _show(job_id))
    assert limit is not None, _show(job_id)
    before = _restarts(job_id)
    # slurmctld reads local time, to the second, and refuses an end already past when the request arrives
    stamp = (datetime.now() + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
    done = subprocess.run(["scontrol", "update", f"JobId={job_id}", f"EndTime={stamp}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _wait_for("requeued by its script", lambda: _restarts(job_id) > before, [job_id], run, 120)
    done = subprocess.run(["scontrol", "update", f"JobId={job_id}", f"TimeLimit={limit.group(1)}"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr


def _warn(job_id: str, run: Path) -> None:
    """The allocation's warning, as Slurm's --signal=B:USR1 sends it (to the batch shell), and its stop request."""
    done = subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _wait_for("the stop request", lambda: stop_request(run) is not None, [job_id], run, 60)


def _drive(run: Path, job_id: str, script: list[tuple[Path, str]], errors: list[BaseException]) -> None:
    """End each allocation where the script says: wait for the cell's pause file, then act on the real job."""
    try:
        for pause, action in script:
            _wait_for(f"paused at {pause.name}", pause.exists, [job_id], run)
            if action in ("warn, then release", "warn, then time limit"):
                _warn(job_id, run)
            if action.endswith("release"):
                moment, _, step = pause.name.partition("-")
                release(pause.parent.parent, moment, int(step) if step else None)
            else:
                _time_limit_now(job_id, run)
    except BaseException as exc:  # re-raised by the test
        errors.append(exc)


def _final_weights(run: Path, steps: int) -> dict:
    from safetensors.torch import load_file

    return load_file(run / f"checkpoints/global_step_{steps}/model/model.safetensors")


def test_an_allocation_ending_at_any_moment_leaves_the_cell_requeued_and_then_finished(slurm_env, tmp_path) -> None:
    """Two tiny-arith cells on the real one-node Slurm, each a job whose allocations end at chosen moments. The
    cell waits at each moment (REPRO_PAUSE_AT, repro.rundir.pause) while the test ends its allocation there
    through Slurm itself: the time limit (`scontrol update EndTime=now`: TERM, Reason=TimeLimit, KillWait), or
    the warning (`scancel --batch --signal=USR1`, what --signal=B:USR1 sends) with the cell let go on. Cell A:
    the time limit while the attempt starts, mid-save, and during its evaluation job; cell B: the warning
    honoured after step 2, the warning with the time limit before step 4 ends, and the time limit after the last
    step. No moment depends on how fast the machine is. Both finish, each step trained once, every allocation's
    end recorded and shown by `repro status`, and the final weights equal an uninterrupted run's."""
    steps, cpu = 6, CpuOptions(steps=6, batch=8)
    straight_dir = tmp_path / "straight"
    env = {k: v for k, v in slurm_env.items() if k != PAUSE_ENV}
    straight = subprocess.Popen(  # the reference, uninterrupted, with the jobs' one thread
        [sys.executable, "cli.py", "run", "--model", "tiny-arith", "--method", "grpo-n4", *cpu.args(),
         "--run-dir", str(straight_dir)],
        cwd=ROOT, env={**env, "REPRO_TORCH_THREADS": "1"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    options = SlurmOptions(time="10", signal_margin=SIGNAL_MARGIN, cpus_per_task=1, max_allocations=6)
    name = cell_name("tiny-arith", "grpo-n4", "standard", 0)
    cells = {}
    for key, pauses, with_eval in (("a", "start,save:4,eval", True), ("b", "step:2,step:4,end", False)):
        sweep_file = tmp_path / f"{key}.yaml"
        evaluation = "eval: {benchmarks: tiny-aime, k: 2, checkpoints: final}\n" if with_eval else ""
        sweep_file.write_text(
            f"name: {key}\nbackbones: [tiny-arith]\nmethods: [grpo-n4]\nprompt_sets: [standard]\n{evaluation}"
        )
        os.environ[PAUSE_ENV] = pauses  # sbatch hands the submitter's environment to every allocation
        try:
            submit_sweep(load_sweep(sweep_file), SlurmScheduler(options=options, project_dir=ROOT), tmp_path / key,
                         options=cpu, wait=False)  # fmt: skip
        finally:
            os.environ.pop(PAUSE_ENV, None)
        run = tmp_path / key / name
        cells[key] = (run, str(job_records(run)[0]["job_id"]))
    (run_a, job_a), (run_b, job_b) = cells["a"], cells["b"]
    eval_dir = run_a / "eval" / f"global_step_{steps}"
    scripts = {
        "a": [(pause_file(run_a, "start"), "time limit"), (pause_file(run_a, "save", 4), "time limit")],
        "b": [
            (pause_file(run_b, "step", 2), "warn, then release"),
            (pause_file(run_b, "step", 4), "warn, then time limit"),
            (pause_file(run_b, "end"), "time limit"),
        ],
    }
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_drive, args=(cells[k][0], cells[k][1], scripts[k], errors), daemon=True) for k in "ab"
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=900)
    assert not errors, errors[0]
    (eval_job,) = [json.loads(x) for x in (run_a / "eval-jobs.jsonl").read_text().splitlines()]
    assert eval_job["after"] == job_a  # submitted once, behind the training job, through all its requeues
    _drive(run_a, str(eval_job["job_id"]), [(pause_file(eval_dir, "eval"), "time limit")], errors)
    assert not errors, errors[0]
    for job_id in (job_a, job_b, str(eval_job["job_id"])):
        run = run_a if job_id != job_b else run_b
        _wait_for("completed", lambda j=job_id: "JobState=COMPLETED" in _show(j), [job_id], run)
    ends = {key: allocation_ends(run) for key, (run, _) in cells.items()}
    print("\n" + "\n".join(f"{key}: {'; '.join(lines)}" for key, lines in ends.items()))
    assert ends["a"] == [
        "1: time limit before its first step, requeued",
        "2: time limit while saving step 4, requeued",
        "3: finished",
        "eval 1: time limit, requeued",
        "eval 2: finished",
    ]
    assert ends["b"] == [
        "1: warning after step 2, requeued",
        "2: time limit during step 4, requeued",
        "3: time limit after the last step, requeued",
        "4: finished",
    ]
    assert "Restarts=2" in _show(job_a) and "Restarts=3" in _show(job_b)
    assert json.loads((eval_dir / "summary.json").read_text())["k"] == 2
    assert straight.wait(timeout=300) == 0, straight.stderr.read()[-2000:]
    want = _final_weights(straight_dir, steps)
    last_b = json.loads((straight_dir / "metrics" / "attempt-001.jsonl").read_text().splitlines()[-1])
    untimed = {k: v for k, v in last_b["data"].items() if not k.startswith("timing_s/")}
    for key, (run, _job) in cells.items():
        attempts = RunDir(run).status()["attempts"]
        assert RunDir(run).state == "finished" and attempts[-1]["state"] == "finished", attempts
        assert _steps(run) == list(range(1, steps + 1)), key  # every step logged once: nothing trained twice
        assert allocations(run) == (len(attempts), 0)
        got = _final_weights(run, steps)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), key
        last = json.loads(sorted((run / "metrics").glob("attempt-*.jsonl"))[-1].read_text().splitlines()[-1])
        assert {k: last["data"][k] for k in untimed} == untimed, key
        assert not (run / STOP_REQUEST).exists()
    # a save cut by the kill left its staging folder; the checkpoint before it was the one resumed
    assert [a.get("resumed_from_step") for a in RunDir(run_a).status()["attempts"]] == [None, None, 3]
    shown = subprocess.run([sys.executable, "cli.py", "status", "--runs-root", str(tmp_path / "b"), "--no-scheduler"],
                           cwd=ROOT, env={**env, "COLUMNS": "400"}, capture_output=True, text=True)  # fmt: skip
    assert shown.returncode == 0 and "2: time limit during step 4, requeued" in shown.stdout, shown.stdout


# A stand-in for verl's trainer in the real allocations: verl 0.9.1's save layout (tests/verl_layout.py: FSDP
# shards, optimizer, extra, data.pt, fp32 Hugging Face weights, the tracker file last), the plugin's
# after-save retention as its checkpoint callback calls it (repro.rundir.retention.retain), one metrics
# line a step, and the stop at a step boundary that repro.verl_plugin.stop_trainer makes. It records which
# saves were already slimmed when it started: what the attempt wrapper did before the trainer ran.
VERL_LAYOUT_TRAINER = """
import json, pathlib, sys, time
sys.path.insert(0, {tests!r})
from verl_layout import TRACKER, write_save
from repro.launch.allocations import honour, stop_request
from repro.rundir.slim import is_slimmed
from repro.rundir.retention import kept_from_overrides, retain

run, metrics, total = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
ckpt = run / "checkpoints"
seen = {{p.name: is_slimmed(p) for p in sorted(ckpt.glob("global_step_*"))}}
(run / f"seen-{{metrics.stem}}.json").write_text(json.dumps(seen))
start = int((ckpt / TRACKER).read_text()) if (ckpt / TRACKER).exists() else 0
for step in range(start + 1, total + 1):
    time.sleep(0.5)  # the step
    write_save(ckpt, step)
    for line in retain(ckpt, kept_from_overrides(sys.argv), f"after the save at step {{step}}"):
        print(line, flush=True)
    with open(metrics, "a") as out:
        out.write(json.dumps({{"step": step, "data": {{"x": float(step)}}}}) + "\\n")
    if stop_request(run) is not None:
        honour(run, step, saved_now=False)
        sys.exit(0)
"""


def test_the_next_allocation_slims_the_saves_the_last_one_left_and_keeps_every_saves_weights(
    slurm_env, tmp_path
) -> None:
    """verl's save layout across two real Slurm allocations of one job, K=2. In the first, a `repro eval`
    holds the run's eval lock, so the after-save retention leaves every save whole and says why; the job is
    warned (USR1 to the batch script, as Slurm's --signal=B does before the time limit), the trainer stops
    after its step, the script requeues. The second allocation's attempt wrapper slims the first's older saves
    before the trainer starts; its trainer slims as it saves. At the end the newest 2 saves are whole and every
    older one holds exactly the bf16 cast of its weights: evaluation finds all of them."""
    from safetensors.torch import load_file
    from verl_layout import RESUME_PARTS, weights

    from repro.evaluation.runner import missing_weights, targets
    from repro.evaluation.shards import eval_lock
    from repro.launch.attempt import PLACEHOLDER
    from repro.launch.eval_stage import kept_steps
    from repro.rundir.retention import KEPT_OVERRIDE
    from repro.rundir.slim import MARKER, tracker_step

    total = 8
    run = RunDir.prepare(tmp_path / "runs" / "verl-layout", {"cell": "verl-layout"}, ["test"]).path
    trainer = tmp_path / "trainer.py"
    trainer.write_text(VERL_LAYOUT_TRAINER.format(tests=str(Path(__file__).parent)))
    argv = [sys.executable, "-m", "repro.launch.attempt", str(run), "--", sys.executable, str(trainer), str(run)]
    argv += [str(run / "metrics" / PLACEHOLDER), str(total), f"{KEPT_OVERRIDE}='2'"]
    scheduler = SlurmScheduler(SlurmOptions(time="10", cpus_per_task=1, max_allocations=3), project_dir=ROOT)
    ckpt = run / "checkpoints"
    with eval_lock(run / "eval"):  # an evaluation of the run, live through the whole first allocation
        job_id = scheduler.submit(_plan(run, argv), "s")["job_id"]
        deadline = time.monotonic() + 180
        while (tracker_step(ckpt) or 0) < 4:  # four saves of the first allocation
            assert time.monotonic() < deadline, _show(job_id)
            time.sleep(0.1)
        warn = subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], capture_output=True, text=True)
        assert warn.returncode == 0, warn.stderr
        while not (attempts := RunDir(run).status().get("attempts", [])) or "ended" not in attempts[0]:
            assert time.monotonic() < deadline, _show(job_id)
            time.sleep(0.1)
    released = datetime.now(UTC).isoformat()
    first = attempts[0]
    stopped = first["last_logged_step"]
    assert first["state"] == "interrupted" and stopped >= 4, first
    assert all(not (ckpt / f"global_step_{s}" / MARKER).exists() for s in range(1, stopped + 1))  # all whole
    deadline = time.monotonic() + 180
    while RunDir(run).status()["state"] != "finished":
        assert time.monotonic() < deadline, _show(job_id)
        time.sleep(0.2)
    attempts = RunDir(run).status()["attempts"]
    out = (run / "slurm" / f"slurm-{job_id}.out").read_text()
    assert [a["state"] for a in attempts] == ["interrupted", "finished"], out[-3000:]
    assert attempts[1]["resumed_from_step"] == stopped and attempts[1]["started"] > released
    assert "requeueing job" in out and "not slimmed after the save at step 3: a repro eval" in out, out[-3000:]
    # the second allocation slimmed the first's older saves before its trainer started, never the newest 2
    seen = json.loads((run / "seen-attempt-002.json").read_text())
    assert seen == {f"global_step_{s}": s <= stopped - 2 for s in range(1, stopped + 1)}, seen
    for step in range(1, stopped - 1):
        assert f"global_step_{step} slimmed at the start of attempt 2" in out, out[-3000:]
    # the end: the newest 2 saves whole, every other one its weights alone, in bf16, equal to torch's cast
    assert kept_steps(run) == list(range(1, total + 1))
    before = after = 0
    for step in range(1, total + 1):
        save = ckpt / f"global_step_{step}"
        hf = load_file(save / "actor" / "huggingface" / "model.safetensors")
        if step > total - 2:
            assert all((save / part).is_file() for part in RESUME_PARTS) and not (save / MARKER).exists()
            assert {t.dtype for t in hf.values()} == {torch.float32, torch.int64}
            continue
        marker = json.loads((save / MARKER).read_text())
        before, after = before + marker["bytes_before"], after + marker["bytes_after"]
        assert sorted(p.name for p in save.iterdir()) == ["actor", MARKER]
        for name, tensor in weights(step).items():
            want = tensor.to(torch.bfloat16) if tensor.dtype == torch.float32 else tensor
            assert torch.equal(hf[name], want), (step, name)
    found = targets(run, checkpoints="all")
    assert [t.step for t in found] == list(range(1, total + 1))
    assert all(missing_weights(Path(t.model_path)) is None for t in found)
    print(f"\n{total - 2} slimmed saves: {before} -> {after} bytes\n" + "\n".join(
        line for line in out.splitlines() if line.startswith("repro:")
    ))  # fmt: skip


def test_a_warning_that_came_while_the_cpu_attempt_started_stops_it_before_its_first_step(tiny_env, tmp_path) -> None:
    """A loaded node can spend most of a short allocation starting Python; a USR1 that came meanwhile must stop the
    trainer before a step the time limit could cut, not after one. The first attempt is warned while it is held
    mid-step 3 (and let go on: it stops after that step); the second is warned while it starts. The restored
    checkpoint stands, and the third attempt goes on from it."""
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "repro.cli", "run", "--model", "tiny-arith", "--method", "grpo-n4", "--batch", "8"]
    argv += ["--steps", "6", "--run-dir", str(run)]
    env = {**tiny_env, "REPRO_LAUNCHER": "slurm", "REPRO_JOB_ID": "42", PAUSE_ENV: "step:3"}
    metrics = run / "metrics" / "attempt-001.jsonl"
    first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for("paused mid-step 3", pause_file(run, "step", 3).exists, [], run)
    request_stop(run, "allocation 1 of slurm job 42 ends in about 10 s", job_id="42")
    release(run, "step", 3)
    assert first.wait(timeout=300) == STOPPED_EXIT, first.stderr.read()[-2000:]
    assert last_logged_step(metrics) == 3
    request_stop(run, "allocation 2 of slurm job 42 ends in about 10 s", job_id="42")  # warned while starting
    stopped = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert stopped.returncode == STOPPED_EXIT, stopped.stderr[-2000:]
    attempt = json.loads((run / "status.json").read_text())["attempts"][-1]
    assert (attempt["state"], attempt["moment"]) == ("interrupted", "starting")
    assert attempt["error"] == "allocation ending: checkpoint at step 3, 0 steps lost"
    assert last_logged_step(run / "metrics" / "attempt-002.jsonl") is None  # no step trained in that attempt
    assert stop_request(run) is None  # honoured, so the next allocation's attempt trains
    resumed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert first_logged_step(run / "metrics" / "attempt-003.jsonl") == 4
    assert last_logged_step(run / "metrics" / "attempt-003.jsonl") == 6
    assert allocation_ends(run) == ["1: interrupted after step 3", "2: interrupted while starting", "3: finished"]


def test_a_verl_save_cut_by_the_kill_leaves_the_previous_checkpoint_whole_and_resumed(tmp_path) -> None:
    """verl writes a save's files, then the tracker file last: a kill mid-save (its weights written, its resume
    parts and the tracker not) leaves the tracker on the step before. The next attempt resumes from that one,
    and the slimming at its start, which keeps the newest two saves, leaves it untouched."""
    from verl_layout import RESUME_PARTS, TRACKER, fingerprint, write_save

    from repro.rundir.retention import retain
    from repro.rundir.slim import MARKER

    run = RunDir.prepare(tmp_path / "run", {"a": 1}, ["repro", "run"])
    ckpt = run.checkpoints_dir
    for step in (1, 2, 3):
        write_save(ckpt, step)
    cut = write_save(ckpt, 4, tracker=False)
    for part in RESUME_PARTS:  # the kill came before these
        (cut / part).unlink()
    whole = fingerprint(ckpt / "global_step_3")
    assert (ckpt / TRACKER).read_text() == "3" and run.latest_checkpoint() == (3, ckpt / "global_step_3")
    lines = retain(ckpt, 2, "at the start of attempt 2")
    assert fingerprint(ckpt / "global_step_3") == whole  # what the resume reads, untouched
    assert [s for s in (1, 2, 3, 4) if (ckpt / f"global_step_{s}" / MARKER).exists()] == [1, 2], lines
    assert run.latest_checkpoint() == (3, ckpt / "global_step_3")
