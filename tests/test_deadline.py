"""The time limit a Ray job runs under (repro.launch.deadline): the warning `margin` seconds before the limit, the
limit's SIGTERM to the cell's process group, SIGKILL after the kill wait, the exit code that asks for a continuation
and the one a cancel gets; then the submitter's continuations (repro.sweep_submit) and the options.

The wrapper's loop runs on a fake clock against a fake cell (no time passes, nothing races); the real-process tests
drive the wrapper by the signals it answers (USR1: the warning now, ALRM: the limit now, TERM: a cancel) at moments
the test picks from files the child writes, with generous timeouts only as failure guards."""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from repro.errors import ReproError
from repro.launch import deadline
from repro.launch.allocations import STOP_REQUEST, STOPPED_EXIT, stop_request
from repro.launch.deadline import Events, Job, TimeLimit, job_log, supervise
from repro.launch.jobs import JobState, job_records
from repro.launch.plan import CpuOptions
from repro.launch.ray_jobs import RayScheduler
from repro.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]

# ---- the loop, on a fake clock ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class FakeCell:
    """A cell living on the fake clock: it finishes (0) at `finish_at`, fails (1) at `fail_at`, stops at its step
    boundary `step_s` after a stop request appears (honouring it as the trainer does: the request is retired, exit
    75), and exits `on_term` on SIGTERM (None: it ignores TERM, and only SIGKILL ends it). `at` maps fake times to
    what the test does then (set a signal's event)."""

    clock: Clock
    run_dir: Path
    finish_at: float = math.inf
    fail_at: float = math.inf
    step_s: float | None = None
    on_term: int | None = 130
    at: dict[float, Callable[[], None]] = field(default_factory=dict)
    pid: int = 4242
    code: int | None = None
    signals: list[tuple[float, int]] = field(default_factory=list)
    seen_request: dict | None = None
    boundary: float | None = None

    def signal(self, signum: int) -> None:  # the wrapper's `signal_group`
        self.signals.append((self.clock.t, int(signum)))
        if signum == signal.SIGKILL:
            self.code = -9
        elif self.on_term is not None:  # TERM, or a cancel's INT
            self.code = self.on_term

    def poll(self) -> int | None:
        return self.code

    def _events(self) -> list[float]:
        times = [self.finish_at, self.fail_at, *self.at]
        if self.boundary is not None:
            times.append(self.boundary)
        return [t for t in times if t > self.clock.t]

    def wait(self, timeout: float) -> int | None:
        if self.code is not None:
            return self.code
        if self.step_s is not None and self.boundary is None and (request := stop_request(self.run_dir)) is not None:
            self.seen_request, self.boundary = request, self.clock.t + self.step_s
        self.clock.t = min([self.clock.t + timeout, *self._events()])
        for when in [t for t in self.at if t <= self.clock.t]:
            self.at.pop(when)()
        if self.clock.t >= self.fail_at:
            self.code = 1
        elif self.clock.t >= self.finish_at:
            self.code = 0
        elif self.boundary is not None and self.clock.t >= self.boundary:
            (self.run_dir / STOP_REQUEST).unlink()  # honoured: the step is saved, the request retired
            self.code = STOPPED_EXIT
        return self.code


def _run(tmp_path: Path, cell_kwargs: dict, limit: float = 100, margin: float = 10, events: Events | None = None):
    clock = Clock()
    cell = FakeCell(clock, tmp_path, **cell_kwargs)
    job = Job(tmp_path, "repro-cell-2-x", allocation=2, max_allocations=4)
    said: list[str] = []
    outcome = supervise(
        cell,
        job,
        limit,
        margin,
        events=events,
        signal_group=cell.signal,
        clock=clock,
        kill_wait_s=30,
        poll_s=0.25,
        say=said.append,
    )  # fmt: skip  (0.25 s and whole-second events: the fake clock's sums are exact)
    return outcome, cell, clock, said


def test_a_cell_that_ends_before_its_limit_is_left_alone(tmp_path) -> None:
    outcome, cell, clock, said = _run(tmp_path, {"finish_at": 50, "step_s": 3})
    assert (outcome.ended_by, outcome.exit_code, outcome.cell_exit) == ("finished", 0, 0)
    assert clock.t == 50 and cell.signals == [] and outcome.warned_s is None and said == []
    failed, cell, clock, _ = _run(tmp_path, {"fail_at": 20})
    assert (failed.ended_by, failed.exit_code, clock.t, cell.signals) == ("failed", 1, 20, [])
    assert deadline._outcome(-9, Job(tmp_path, None), None, None, None, None).exit_code == 137  # as a shell says


def test_the_warning_comes_margin_seconds_before_the_limit_and_a_stop_on_it_is_a_continuation(tmp_path) -> None:
    """The request is the Slurm trap's: its reason, this job's id (so `repro run` keeps it, whenever it starts) and
    the allocation; the cell stops at its step boundary, before the limit, so nothing is signalled."""
    outcome, cell, clock, said = _run(tmp_path, {"step_s": 3})
    assert cell.seen_request is not None
    assert cell.seen_request["job_id"] == "repro-cell-2-x" and cell.seen_request["allocation"] == 2
    assert cell.seen_request["reason"] == "allocation 2 of ray job repro-cell-2-x ends in about 10 s"
    assert (outcome.ended_by, outcome.exit_code, outcome.warned_s) == ("stopped on request", STOPPED_EXIT, 90)
    assert clock.t == 93 and cell.signals == [] and outcome.terminated_s is None
    assert any("asked the trainer to stop" in line for line in said)


def test_the_limit_terminates_the_cells_group_whatever_it_is_doing_and_is_a_continuation(tmp_path) -> None:
    """A step longer than the margin: TERM at the limit itself; the cell's exit (interrupted, 130) becomes
    STOPPED_EXIT, and the request it never reached is removed (the next job must not stop after its first step)."""
    outcome, cell, _, _ = _run(tmp_path, {"step_s": 30})
    assert cell.signals == [(100, signal.SIGTERM)]
    assert (outcome.ended_by, outcome.exit_code, outcome.cell_exit) == ("deadline", STOPPED_EXIT, 130)
    assert (outcome.warned_s, outcome.terminated_s, outcome.killed_s) == (90, 100, None)
    assert not (tmp_path / STOP_REQUEST).exists()


@pytest.mark.parametrize(
    ("moment", "cell_exit", "wrapper_exit", "ended_by"),
    [
        ("while the cell starts, before its SIGTERM handler", -15, STOPPED_EXIT, "deadline"),
        ("mid-step or mid-save: recorded interrupted", 130, STOPPED_EXIT, "deadline"),
        ("at the step boundary it was stopping at anyway", STOPPED_EXIT, STOPPED_EXIT, "deadline"),
        ("an exception the TERM raised in the trainer", 1, STOPPED_EXIT, "deadline"),
        ("after the last step: the cell finished", 0, 0, "finished"),
    ],
)
def test_the_moment_the_limit_lands_only_decides_where_the_cell_resumes(
    tmp_path, moment: str, cell_exit: int, wrapper_exit: int, ended_by: str
) -> None:
    """Whatever the cell was doing when the limit's TERM came (its exit code says), the job asks for a continuation
    from the last checkpoint, unless the cell had finished: never a failure, which would spend a retry."""
    outcome, _, _, _ = _run(tmp_path, {"on_term": cell_exit})
    assert (outcome.exit_code, outcome.ended_by, outcome.cell_exit) == (wrapper_exit, ended_by, cell_exit), moment


def test_a_cell_that_outlives_sigterm_is_killed_after_the_kill_wait(tmp_path) -> None:
    outcome, cell, clock, said = _run(tmp_path, {"on_term": None})
    assert cell.signals == [(100, signal.SIGTERM), (130, signal.SIGKILL)] and clock.t == 130
    assert (outcome.ended_by, outcome.exit_code, outcome.cell_exit, outcome.killed_s) == ("deadline", 75, -9, 130)
    assert any("SIGKILL" in line for line in said)


def test_a_cancel_is_never_continued_and_reaches_a_cell_that_did_not_get_it(tmp_path) -> None:
    """Ray's stop_job (repro cancel) TERMs every process of the job: the cell ends on its own TERM and the wrapper
    sends nothing more (a second TERM would cut the cell's record short). A cancel that reached the wrapper alone is
    passed to the cell's group after the grace. Either way the limit no longer acts and the exit is 128 + the
    signal, even when the cell had just stopped on the warning's request."""
    events = Events()
    cell: FakeCell

    def ray_stop() -> None:  # the wrapper and the cell, at once
        events.cancel, cell.code = signal.SIGTERM, 130

    clock = Clock()
    cell = FakeCell(clock, tmp_path, at={95.0: ray_stop}, step_s=30)
    outcome = supervise(
        cell, Job(tmp_path, "j"), 100, 10, events=events, signal_group=cell.signal, clock=clock, poll_s=0.25
    )
    assert cell.signals == [] and clock.t == 95
    assert (outcome.ended_by, outcome.exit_code, outcome.cell_exit) == ("cancelled", 143, 130)
    assert outcome.terminated_s is None  # the wrapper sent nothing
    events = Events()
    alone, cell, _, said = _run(
        tmp_path, {"at": {95.0: lambda: setattr(events, "cancel", signal.SIGTERM)}, "step_s": 30}, events=events
    )
    assert cell.signals == [(97, signal.SIGTERM)]  # after the grace; the limit at 100 no longer acts
    assert (alone.ended_by, alone.exit_code, alone.terminated_s) == ("cancelled", 143, 97)
    assert any("will not be continued" in line for line in said)
    events = Events()
    stopped, cell, _, _ = _run(
        tmp_path,
        {"at": {92.0: lambda: setattr(events, "cancel", signal.SIGINT)}, "step_s": 3, "on_term": STOPPED_EXIT},
        events=events,
    )
    assert (stopped.ended_by, stopped.exit_code, stopped.cell_exit) == ("cancelled", 130, STOPPED_EXIT)
    assert cell.signals == []  # it stopped at its boundary (93) within the grace


def test_usr1_and_alrm_bring_the_warning_and_the_limit_forward(tmp_path) -> None:
    events = Events()
    at = {5.0: lambda: setattr(events, "warn", True), 20.0: lambda: setattr(events, "end", True)}
    outcome, cell, clock, _ = _run(tmp_path, {"at": at, "step_s": 50}, limit=3600, margin=60, events=events)
    assert (outcome.warned_s, outcome.terminated_s, cell.signals) == (5, 20, [(20, signal.SIGTERM)])
    assert outcome.ended_by == "deadline" and outcome.exit_code == STOPPED_EXIT and clock.t == 20


def test_a_cell_finishing_as_it_is_warned_leaves_no_request(tmp_path) -> None:
    outcome, _, _, _ = _run(tmp_path, {"finish_at": 91, "step_s": 3})
    assert (outcome.ended_by, outcome.exit_code, outcome.warned_s) == ("finished", 0, 90)
    assert stop_request(tmp_path) is None


# ---- the wrapper on real processes, driven by signals -----------------------------------------------------

# The child: writes its pid and its grandchild's (a `sleep` in its process group) to ready.json; then, by MODE,
# honours a stop request (exit 75) or ignores it; on SIGTERM it writes term.json and exits 130. Each file is written
# whole under another name and renamed: the test reads it as soon as it exists (CI at e94c521 read an empty one).
CHILD = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path
run, mode = Path(sys.argv[1]), sys.argv[2]
def write(name, record):
    (run / (name + ".tmp")).write_text(json.dumps(record))
    os.replace(run / (name + ".tmp"), run / name)
def on_term(*_):
    write("term.json", {"pid": os.getpid()})
    sys.exit(130)
signal.signal(signal.SIGTERM, on_term)
sleeper = subprocess.Popen(["sleep", "600"])
ready = {"pid": os.getpid(), "pgid": os.getpgid(0), "sleeper": sleeper.pid}
ready["allocation"] = os.environ.get("REPRO_ALLOCATION")
write("ready.json", ready)
while True:
    if mode == "honour" and (run / ".stop-request.json").exists():
        (run / ".stop-request.json").unlink()
        sleeper.kill()
        sys.exit(75)
    time.sleep(0.02)
"""


def _wait_for(predicate: Callable[[], object], what: str, seconds: float = 60) -> None:
    end = time.monotonic() + seconds  # a failure guard only: each test proceeds as soon as its file appears
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def _start(
    tmp_path: Path, mode: str, limit: str = "3600", margin: str = "60", wait: bool = True
) -> tuple[subprocess.Popen, Path, dict | None]:
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "child.py").write_text(CHILD)
    (run / STOP_REQUEST).write_text("{}")  # stale: an earlier job's request
    argv = [sys.executable, "-m", "repro.launch.deadline", str(run), "--time", limit, "--margin", margin]
    argv += ["--allocation", "3", "--max-allocations", "5", "--kill-wait", "30"]
    argv += ["--", sys.executable, str(tmp_path / "child.py"), str(run), mode]
    env = {**os.environ, "REPRO_JOB_ID": "repro-cell-3-t"}
    with open(tmp_path / "out.txt", "w") as out:  # a file, not a pipe: a killed wrapper's grandchild may hold it
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if not wait:
        return proc, run, None
    _wait_for(lambda: (run / "ready.json").exists() and deadline.live_record(run), "the child and the live record")
    ready = json.loads((run / "ready.json").read_text())
    return proc, run, ready


def _ended(proc: subprocess.Popen, folder: Path) -> str:
    proc.wait(timeout=60)
    return (folder / "out.txt").read_text()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not reaped yet) counts as gone
        return f.read().split(")")[-1].split()[0] == "Z"


def test_usr1_writes_the_stop_request_and_the_stop_is_a_continuation(tmp_path) -> None:
    proc, run, ready = _start(tmp_path, "honour")
    live = deadline.live_record(run)
    assert live is not None and live["pid"] == proc.pid and live["cell_pgid"] == ready["pid"] == ready["pgid"]
    assert (live["job_id"], live["allocation"], live["limit_s"], live["margin_s"]) == ("repro-cell-3-t", 3, 3600, 60)
    assert os.getpgid(proc.pid) != ready["pgid"]  # the cell has a group of its own
    assert ready["allocation"] == "3"  # the attempt records it, and `repro status` pairs it with the log's line
    os.kill(proc.pid, signal.SIGUSR1)
    out = _ended(proc, tmp_path)
    assert proc.returncode == STOPPED_EXIT, out
    (line,) = job_log(run)
    assert (line["ended_by"], line["cell_exit"], line["exit"], line["job_id"], line["max_allocations"]) == (
        "stopped on request", 75, 75, "repro-cell-3-t", 5
    )  # fmt: skip
    assert line["terminated_s"] is None and line["warned_s"] is not None
    assert not (run / deadline.LIVE_FILE).exists() and "allocation 3 of at most 5" in out


def test_alrm_terminates_the_whole_group_and_term_to_the_wrapper_is_a_cancel(tmp_path) -> None:
    proc, run, ready = _start(tmp_path, "ignore")
    os.kill(proc.pid, signal.SIGALRM)
    out = _ended(proc, tmp_path)
    assert proc.returncode == STOPPED_EXIT, out
    assert json.loads((run / "term.json").read_text())["pid"] == ready["pid"]
    _wait_for(lambda: _gone(ready["sleeper"]), "the grandchild to die of the group's TERM")
    assert [x["ended_by"] for x in job_log(run)] == ["deadline"]
    assert stop_request(run) is None  # the stale request was dropped at the start, none was written since

    cancel = tmp_path / "cancel"
    cancel.mkdir()
    proc, run, ready = _start(cancel, "honour")
    os.kill(proc.pid, signal.SIGTERM)
    out = _ended(proc, cancel)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert (run / "term.json").exists() and [x["ended_by"] for x in job_log(run)] == ["cancelled"]


def test_the_cell_does_not_outlive_a_killed_wrapper(tmp_path) -> None:
    """Ray's cleanup of a lost job SIGKILLs the entrypoint's group, which the cell has left: the parent-death signal
    TERMs the cell then."""
    proc, run, ready = _start(tmp_path, "ignore")
    proc.kill()
    proc.wait(timeout=60)
    _wait_for(lambda: (run / "term.json").exists(), "the cell's TERM after its wrapper died")
    _wait_for(lambda: _gone(ready["pid"]), "the cell to exit")
    os.kill(ready["sleeper"], signal.SIGKILL)  # the grandchild has no parent-death signal of its own


def test_the_real_clock_ends_the_job_as_a_continuation(tmp_path) -> None:
    """A two-second limit with a one-second warning on a cell that never finishes: whether it stops on the request
    or is ended by the TERM (a loaded machine may be slow to see the request), the job asks for a continuation.
    The test does not wait for the cell to be ready first: on a loaded machine the limit may come before the
    cell has even started (a TERM before its handler), which must end the same way."""
    proc, run, _ = _start(tmp_path, "honour", limit="2", margin="1", wait=False)
    out = _ended(proc, tmp_path)
    assert proc.returncode == STOPPED_EXIT, out
    assert [x["ended_by"] for x in job_log(run)] in (["stopped on request"], ["deadline"])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["RUN", "--time", "10", "--", "true"], "--margin is required"),
        (["RUN", "--time", "ten", "--margin", "1", "--", "true"], "not a number"),
        (["RUN", "--time", "10", "--margin", "1"], "usage"),
        (["RUN", "--time", "10", "--margin", "10", "--", "true"], "must be positive and under the time limit"),
        (["RUN", "--time", "10", "--margin", "1", "--wat", "1", "--", "true"], "unknown or incomplete options"),
    ],
)
def test_bad_wrapper_arguments_are_one_error_line(tmp_path, capsys, args: list[str], fragment: str) -> None:
    (tmp_path / "run").mkdir()
    args = [str(tmp_path / "run") if a == "RUN" else a for a in args]
    assert deadline.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err, err


def test_the_job_id_variable_is_the_attempts() -> None:
    from repro.launch.attempt import JOB_ID_ENV

    assert deadline.JOB_ID_ENV == JOB_ID_ENV


# ---- the options and the entrypoint ---------------------------------------------------------------------------


def test_time_limit_options() -> None:
    limit = TimeLimit.from_values({"time": "1-00:00:00", "signal_margin": 1800, "max_allocations": 6}, "here")
    assert limit == TimeLimit("1-00:00:00", 1800, 6) and limit.seconds == 86400
    assert TimeLimit.from_values({"address": "http://h:8265"}, "here") is None
    for values, fragment in (
        ({"time": "soon"}, "is not a Slurm time"),
        ({"time": "10", "signal_margin": 600}, "is not less than the time limit"),
        ({"time": "10", "max_allocations": 0}, "max_allocations must be a positive integer"),
        ({"signal_margin": 60}, "signal-margin apply to a Ray cell's time limit"),
        ({"max_allocations": 3}, "give the limit too"),
    ):
        with pytest.raises(ReproError, match=fragment):
            TimeLimit.from_values(values, "here")


def _plan(run_dir: Path) -> SimpleNamespace:
    argv = [sys.executable, "-m", "repro.cli", "run", "--model", "tiny-arith", "--run-dir", str(run_dir)]
    return SimpleNamespace(name="cell", argv=argv, run_dir=run_dir, is_gpu=False, gpu=None, cell=None)


def test_the_entrypoint_is_unchanged_without_a_limit_and_wrapped_with_one(tmp_path, monkeypatch) -> None:
    from repro.launch import ray_jobs

    sent: list[dict] = []

    class Client:
        def submit_job(self, **kwargs) -> str:
            sent.append(kwargs)
            return kwargs["submission_id"]

    monkeypatch.setattr(ray_jobs, "_client", lambda address: Client())
    plan = _plan(tmp_path)
    plain = RayScheduler(project_dir=tmp_path, python="python").submit(plan, "s")
    assert plain["entrypoint"] == shlex.join(["python", *plan.argv[1:]])  # byte for byte what it was
    assert "time_limit_s" not in plain and "allocation" not in plain
    limited = RayScheduler(project_dir=tmp_path, python="python", limit=TimeLimit("4:00:00", None, 3))
    record = limited.submit(plan, "s", then="echo next", allocation=2)
    wrapper = ["python", "-m", "repro.launch.deadline", str(tmp_path), "--time", "14400", "--margin", "60"]
    wrapper += ["--allocation", "2", "--max-allocations", "3", "--"]
    assert record["entrypoint"] == shlex.join([*wrapper, "python", *plan.argv[1:]]) + " && echo next"
    assert (record["time_limit_s"], record["signal_margin"], record["allocation"], record["max_allocations"]) == (
        14400, 60, 2, 3
    )  # fmt: skip
    assert sent[-1]["entrypoint"] == record["entrypoint"]
    short = RayScheduler(project_dir=tmp_path, limit=TimeLimit("1:00", None)).cell_argv(plan)
    assert short[short.index("--margin") + 1] == "30"  # a CPU cell's 60 s, at most half the limit


# ---- the submitter's continuations, against a scripted scheduler ---------------------------------------------


@dataclass
class Scripted:
    """A scheduler whose jobs end as `endings` says, one per job in order: "limit" (the wrapper's STOPPED_EXIT),
    "failed", "cancelled" (Ray's STOPPED) or "finished" (the run folder then says finished)."""

    endings: list[str]
    max_allocations: int = 3
    name: str = "ray"
    submitted: list[dict] = field(default_factory=list)

    def check(self) -> None:
        pass

    def submit(self, plan, sweep_name: str, then: str | None = None, allocation: int = 1) -> dict:
        n = len(self.submitted)
        record = {"launcher": "ray", "job_id": f"job-{n + 1}", "allocation": allocation, "ending": self.endings[n]}
        self.submitted.append(record)
        run = RunDir(plan.run_dir)
        run.begin_attempt(launcher="ray", job_id=record["job_id"])
        state = {"finished": "finished", "failed": "failed"}.get(record["ending"], "interrupted")
        run.end_attempt(state, None if state == "finished" else record["ending"])
        return record

    def state(self, record: dict) -> JobState:
        ending = record["ending"]
        return JobState({"limit": "failed", "failed": "failed"}.get(ending, ending), ending)

    def stopped_for_continuation(self, record: dict) -> bool:
        return record["ending"] == "limit"

    def cancel(self, record: dict) -> None:
        pass


def _submit(tmp_path: Path, scheduler: Scripted, retries: int = 0):
    from repro.sweep import load_sweep
    from repro.sweep_submit import submit_sweep

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "one.yaml"
    path.write_text("name: one\nbackbones: [tiny-arith]\nmethods: [grpo-n4]\nprompt_sets: [standard]\n")
    report = submit_sweep(
        load_sweep(path), scheduler, tmp_path / "runs", options=CpuOptions(2, 8), wait=True, poll=0.01,
        retries=retries, timeout=60,
    )  # fmt: skip
    (cell,) = report.cells
    return cell, [r["allocation"] for r in job_records(tmp_path / "runs" / cell.name)]


def test_a_job_ended_by_its_limit_is_continued_without_spending_a_retry(tmp_path) -> None:
    cell, chain = _submit(tmp_path, Scripted(["limit", "limit", "finished"]), retries=0)
    assert (cell.state, cell.submissions, cell.continuations, chain) == ("finished", 1, 2, [1, 2, 3])
    assert cell.action == "continued (allocation 3 of 3)"


def test_the_last_allowed_job_leaves_the_cell_interrupted(tmp_path) -> None:
    cell, chain = _submit(tmp_path, Scripted(["limit", "limit", "limit", "finished"]), retries=2)
    assert (cell.state, chain, cell.allocations_used) == ("interrupted", [1, 2, 3], True)
    assert cell.action == "allocation 3 was the last of 3"


def test_a_cancelled_job_is_not_continued_and_a_failure_is_a_retry_that_restarts_the_chain(tmp_path) -> None:
    cell, chain = _submit(tmp_path / "a", Scripted(["limit", "cancelled", "finished"]))
    assert (cell.state, chain) == ("cancelled", [1, 2])
    cell, chain = _submit(tmp_path / "b", Scripted(["limit", "failed", "limit", "finished"]), retries=1)
    assert (cell.state, chain, cell.submissions, cell.continuations) == ("finished", [1, 2, 1, 2], 2, 2)
    cell, chain = _submit(tmp_path / "c", Scripted(["limit", "failed", "finished"]), retries=0)
    assert (cell.state, chain) == ("failed", [1, 2])


# ---- the command line ----------------------------------------------------------------------------------------


def _sweep_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "one.yaml"
    path.write_text("name: one\nbackbones: [tiny-arith]\nmethods: [grpo-n4]\nprompt_sets: [standard]\n" + extra)
    return path


@pytest.mark.parametrize(
    ("flags", "extra", "fragment"),
    [
        (["--time", "soon"], "", "time 'soon' is not a Slurm time"),
        (["--time", "10", "--signal-margin", "600"], "", "is not less than the time limit"),
        (["--signal-margin", "60"], "", "signal-margin apply to a Ray cell's time limit"),
        ([], "ray: {max_allocations: 3}\n", "max-allocations apply to a Ray cell's time limit"),
        ([], "ray: {time: '1:00:00', signal_margin: 0}\n", "signal_margin must be a positive integer"),
        ([], "ray: {time: 1:00:00}\n", "time 3600 must be a string such as '4:00:00' (quoted in YAML)"),
    ],
)
def test_a_bad_ray_time_limit_is_one_error_line_and_exit_2(tmp_path, capsys, flags, extra, fragment) -> None:
    from repro.cli import main

    argv = ["sweep", "run", str(_sweep_file(tmp_path, extra)), "--launcher", "ray", "--runs-root", str(tmp_path)]
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err, err


def test_the_dry_run_shows_the_wrapper_only_with_a_limit_and_help_gives_an_example(
    tmp_path, capsys, monkeypatch
) -> None:
    from repro.cli import main

    monkeypatch.setenv("COLUMNS", "400")  # --help's lines unwrapped

    argv = ["sweep", "run", str(_sweep_file(tmp_path)), "--launcher", "ray", "--runs-root", str(tmp_path), "--dry-run"]
    assert main(argv) == 0
    plain = capsys.readouterr().out.splitlines()[0]
    assert plain.startswith("python -m repro.cli run ") and "deadline" not in plain  # as it was
    assert main([*argv, "--time", "2:00:00", "--max-allocations", "6"]) == 0
    wrapped = capsys.readouterr().out.splitlines()[0]
    assert wrapped.startswith("python -m repro.launch.deadline ") and wrapped.endswith(f" -- {plain}")
    assert "--time 7200 --margin 60 --allocation 1 --max-allocations 6 -- python -m repro.cli run" in wrapped
    assert main(["sweep", "run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "repro sweep run sweeps/paper.yaml --launcher ray --time 1-00:00:00 --max-allocations 4 --wait" in text
    assert "e.g. --launcher ray --time 1-00:00:00 --wait" in text and "e.g. --max-allocations 8" in text


def test_a_limit_that_came_before_the_attempt_began_leaves_the_cell_interrupted_not_failed(tmp_path) -> None:
    """On a loaded node a five-second limit can end the job before `repro run` begins its attempt: the run folder
    then knows nothing of the job, and the job's end (the wrapper's STOPPED_EXIT) says it is an interruption to
    continue; a job that failed there is still a failure, with its last line."""
    from repro.launch.jobs import record_job
    from repro.launch.state import cell_state

    for ending, state in (("limit", "interrupted"), ("failed", "failed")):
        run = tmp_path / ending
        RunDir.prepare(run, {"x": 1}, ["repro", "run"])
        record_job(run, {"launcher": "ray", "job_id": "job-1", "ending": ending})
        got = cell_state(run, scheduler=Scripted([]))
        assert got.state == state, got
    assert (
        "reached its time limit before its attempt began"
        in cell_state(tmp_path / "limit", scheduler=Scripted([])).reason
    )
