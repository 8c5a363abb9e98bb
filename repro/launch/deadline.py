"""A time limit for a job whose scheduler has none (Ray's Jobs API), ending it as Slurm ends an allocation.

A paper cell trains for ~48 h; a Ray cluster shared with others, or one on preemptible nodes, may want each job
to hold its resources for a bounded time and then yield, as a Slurm partition's --time makes it. Ray's Jobs API
has no such limit, so the Ray launcher (`repro.launch.ray_jobs`, with `--time`) starts the cell through this
wrapper::

    python -m repro.launch.deadline RUN_DIR --time SECONDS --margin SECONDS [--allocation N]
        [--max-allocations M] [--kill-wait SECONDS] -- COMMAND...

It runs COMMAND (the cell's `repro run`, or `repro.launch.attempt` for verl) in a process group of its own and
does what Slurm does with `--time` and `--signal=B:USR1@<margin>` plus the job script's trap
(`repro.launch.slurm.continuation_lines`):

* `margin` seconds before the limit it writes RUN/.stop-request.json (`repro.launch.allocations.request_stop`:
  the same fields the trap writes); the trainer finishes its step, saves it and exits with STOPPED_EXIT;
* at the limit it sends SIGTERM to the cell's process group (what a scheduler's limit does), and SIGKILL
  `kill_wait` seconds later (Slurm's KillWait) to whatever is left;
* it exits with STOPPED_EXIT when the cell stopped on request or was ended by the limit, whatever moment the
  limit came at (while the cell started, mid-step, mid-save): the run folder's last checkpoint stands, and the
  waiting submitter (`repro.sweep_submit`) submits the next job as a continuation, not as a failure retry. A
  cell that finished or failed on its own exits with its own code.

SIGTERM or SIGINT to the wrapper itself is a cancel (Ray's stop_job, which `repro cancel` calls): the wrapper exits
128 + the signal, never STOPPED_EXIT, so a cancelled cell is not continued. Ray (2.x) signals every process of the
job's tree, the cell included, so the wrapper passes the signal on to the cell's group only if the cell is still
there `cancel_grace` seconds later (a cancel that reached the wrapper alone): a second TERM while `repro run`
records its first would cut that record short.

SIGUSR1 is the warning now and SIGALRM the limit now: what Slurm's `scancel --signal=USR1` and an earlier limit
would do, for an operator who wants a job to yield early, and how the tests drive the deadline to a moment they
choose. The cell gets SIGTERM when the wrapper dies (SIGKILL included: Ray's own cleanup of a lost job kills the
entrypoint's process group, which the cell has left), so no cell outlives its job.

While the job runs, RUN/.deadline.json says where its limit stands (pid, host, the warning's and the limit's
times); when it ends, one line in RUN/deadlines.jsonl says which moment ended it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from repro.atomic import read_records, write_text
from repro.errors import ReproError
from repro.launch.allocations import ALLOCATION_ENV, DEADLINE_LOG, STOPPED_EXIT, discard_request, request_stop
from repro.launch.slurm_options import SlurmOptions, time_seconds

LIVE_FILE = ".deadline.json"  # the running job's limit (removed when the job ends)
LOG_FILE = DEADLINE_LOG  # one line per job that ran under a limit: how it ended (repro status reads it)
KILL_WAIT_S = 30.0  # Slurm's default KillWait: TERM, then KILL this much later
CANCEL_GRACE_S = 2.0  # a cancel reaches the cell itself from Ray; passed on only if the cell outlives this
POLL_S = 0.2  # how often the wrapper looks at its clock and its signals while the cell runs
DEFAULT_MAX_ALLOCATIONS = 4
JOB_ID_ENV = "REPRO_JOB_ID"  # repro.launch.attempt.JOB_ID_ENV: the launcher's job id, which the request names
PR_SET_PDEATHSIG = 1  # linux/prctl.h
ENDINGS = ("finished", "failed", "stopped on request", "deadline", "cancelled")


@dataclass(frozen=True)
class TimeLimit:
    """A Ray cell's time limit per job, in the formats of the Slurm options of the same names (`--time`,
    `--signal-margin`, `--max-allocations`), from the command line, else the sweep file's `ray:` mapping. None of
    it by default: a Ray job then runs until its cell ends, as before."""

    time: str
    signal_margin: int | None = None  # default: the Slurm launcher's for the cell (repro.launch.slurm.signal_margin)
    max_allocations: int = DEFAULT_MAX_ALLOCATIONS  # jobs per submission in all: the first and its continuations

    @property
    def seconds(self) -> int:
        return time_seconds(self.time)

    def check(self, where: str) -> None:
        """The same bounds as the Slurm options (time format, positive integers, a margin under the limit)."""
        SlurmOptions(time=self.time, signal_margin=self.signal_margin, max_allocations=self.max_allocations).check(
            where
        )

    @classmethod
    def from_values(cls, values: dict[str, Any], where: str) -> TimeLimit | None:
        """From `time`, `signal_margin`, `max_allocations` (None: not given); None when no time is given. A margin
        or a job count without a time limit would be silently ignored, so it is refused."""
        time_value = values.get("time")
        rest = {k: values[k] for k in ("signal_margin", "max_allocations") if values.get(k) is not None}
        if time_value is None:
            if rest:
                names = " and ".join(k.replace("_", "-") for k in rest)
                raise ReproError(
                    f"{where}: {names} apply to a Ray cell's time limit per job; give the limit too "
                    "(--time 4:00:00, or time: in the sweep file's ray: mapping)"
                )
            return None
        if not isinstance(time_value, str):  # YAML reads 1:00:00 as the number 3600 (base 60)
            raise ReproError(f"{where}: time {time_value!r} must be a string such as '4:00:00' (quoted in YAML)")
        limit = cls(time=time_value, **rest)
        limit.check(where)
        return limit


# ---- the wrapper ---------------------------------------------------------------------------------------


class Cell(Protocol):
    """The wrapped process, as the loop sees it (a `subprocess.Popen` through `_Process`, or a test's fake)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None when `timeout` seconds pass first."""
        ...


@dataclass
class Events:
    """What the wrapper's signal handlers asked for; the loop acts on it at its next look."""

    warn: bool = False  # SIGUSR1: the warning now
    end: bool = False  # SIGALRM: the time limit now
    cancel: int | None = None  # SIGTERM / SIGINT: the job is being stopped (Ray's stop_job)


@dataclass
class Outcome:
    """How one job under a limit ended: what RUN/deadlines.jsonl records and what the wrapper exits with."""

    ended_by: str  # one of ENDINGS
    exit_code: int  # the wrapper's
    cell_exit: int | None  # the cell's own (negative: killed by that signal)
    warned_s: float | None = None  # seconds after the start at which the stop request was written
    terminated_s: float | None = None  # ... at which the cell's group got SIGTERM (the limit, or a cancel)
    killed_s: float | None = None  # ... at which it got SIGKILL


@dataclass(frozen=True)
class Job:
    """The job the wrapper runs under: which run folder, which job (the stop request names it) and its place in
    its chain of continuations (for the messages and the request, as the Slurm trap's `allocation`)."""

    run_dir: Path
    job_id: str | None
    allocation: int = 1
    max_allocations: int = DEFAULT_MAX_ALLOCATIONS


def supervise(
    cell: Cell,
    job: Job,
    limit_s: float,
    margin_s: float,
    *,
    events: Events | None = None,
    signal_group: Callable[[int], None],
    clock: Callable[[], float] = time.monotonic,
    kill_wait_s: float = KILL_WAIT_S,
    cancel_grace_s: float = CANCEL_GRACE_S,
    poll_s: float = POLL_S,
    say: Callable[[str], None] = print,
    on_change: Callable[[dict[str, Any]], None] = lambda _state: None,
) -> Outcome:
    """Hold `cell` to `limit_s` seconds from now on `clock`: the stop request at `limit_s - margin_s` (or on
    `events.warn`), SIGTERM to its group at `limit_s` (or on `events.end`), SIGKILL `kill_wait_s` after a TERM;
    `events.cancel` ends the limit's part, passes that signal on to a cell that outlives `cancel_grace_s`, and is
    never continued. Returns once the cell has exited.

    Everything the loop does goes through `signal_group`, `clock` and `cell.wait`, so a test drives it with a
    fake clock and a fake cell and no real time passes; `on_change` gets the live record after each event."""
    events = events if events is not None else Events()
    start = clock()
    warn_at = start + max(0.0, limit_s - margin_s)
    end_at = start + limit_s
    warned = terminated = killed = None
    cancel: int | None = None
    forward_at: float | None = None  # when a cancel is passed on to a cell still running
    kill_at: float | None = None

    def since() -> float:
        return round(clock() - start, 3)

    code = cell.poll()
    while code is None:
        now = clock()
        if events.cancel is not None and cancel is None:
            cancel, forward_at = events.cancel, now + cancel_grace_s
            say(f"repro: signal {cancel} at {_hms()}: the job is being stopped; it will not be continued")
            on_change({"cancelled": since()})
        if forward_at is not None and terminated is None and now >= forward_at:
            say(f"repro: the cell outlived the cancel by {cancel_grace_s:g} s: signal {cancel} to its group")
            signal_group(int(cancel or signal.SIGTERM))
            terminated, kill_at = since(), now + kill_wait_s
            on_change({"terminated": terminated})
        if cancel is None and warned is None and (events.warn or now >= warn_at):
            request_stop(
                job.run_dir,
                f"allocation {job.allocation} of ray job {job.job_id} ends in about {round(margin_s)} s",
                job_id=job.job_id,
                allocation=job.allocation,
            )
            warned = since()
            say(f"repro: warning at {_hms()}: asked the trainer to stop after its step")
            on_change({"warned": warned})
        if cancel is None and terminated is None and (events.end or now >= end_at):
            say(f"repro: time limit at {_hms()}: SIGTERM to the cell (its last checkpoint stands)")
            signal_group(signal.SIGTERM)
            terminated, kill_at = since(), now + kill_wait_s
            on_change({"terminated": terminated})
        if kill_at is not None and killed is None and now >= kill_at:
            say(f"repro: the cell outlived SIGTERM by {kill_wait_s:g} s: SIGKILL")
            signal_group(signal.SIGKILL)
            killed = since()
            on_change({"killed": killed})
        upcoming = [
            t
            for t, done in ((warn_at, warned), (end_at, terminated), (forward_at, terminated), (kill_at, killed))
            if t is not None and done is None
        ]
        wait = min([poll_s, *(t - now for t in upcoming)])
        code = cell.wait(max(0.0, wait))
    if cancel is None and events.cancel is not None:  # it came with the cell's own TERM, which ended the cell first
        cancel = events.cancel
    return _outcome(code, job, cancel, warned, terminated, killed)


def _outcome(
    code: int, job: Job, cancel: int | None, warned: float | None, terminated: float | None, killed: float | None
) -> Outcome:
    """The wrapper's exit code from the cell's, and what ended the job."""
    if code != STOPPED_EXIT:
        # a warning that came as the cell was finishing (or failing) asked for nothing it could still do
        discard_request(job.run_dir)
    times = {"warned_s": warned, "terminated_s": terminated, "killed_s": killed}
    if cancel is not None:
        return Outcome("cancelled", 128 + cancel, code, **times)
    if code == 0:
        return Outcome("finished", 0, code, **times)
    if terminated is not None:  # ended by the limit, at whatever moment: its last checkpoint is where it resumes
        return Outcome("deadline", STOPPED_EXIT, code, **times)
    if code == STOPPED_EXIT:
        return Outcome("stopped on request", STOPPED_EXIT, code, **times)
    return Outcome("failed", code if code > 0 else 128 - code, code, **times)


def _hms() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class _Process:
    """A `subprocess.Popen` as the loop's `Cell` (whose wait returns None on a timeout instead of raising)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.pid = proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def _own_group_ending_with(parent: int) -> Callable[[], None]:
    """The cell's pre-exec step: a process group of its own (so the limit's SIGTERM reaches the whole cell and
    not this wrapper or the shell of Ray's entrypoint), and SIGTERM when the wrapper dies (Linux's parent-death
    signal), since Ray's cleanup after a lost job kills only the entrypoint's group."""

    libc = None
    if sys.platform.startswith("linux"):  # loaded here: the child between fork and exec should only call
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        os.setpgid(0, 0)
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent:  # the wrapper died before the request took effect
                os.kill(os.getpid(), signal.SIGTERM)

    return setup


def _signal_group(pgid: int) -> Callable[[int], None]:
    def send(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(pgid, signum)

    return send


def run(
    command: Sequence[str],
    job: Job,
    limit_s: float,
    margin_s: float,
    kill_wait_s: float = KILL_WAIT_S,
) -> int:
    """Run `command` under the limit, with the signal handlers and the run folder's records; returns the exit code."""
    if not command:
        raise ReproError("no command to run under the time limit")
    if not job.run_dir.is_dir():
        raise ReproError(f"{job.run_dir} is not a run folder (the launcher prepares it before submitting)")
    if not 0 < margin_s < limit_s:
        raise ReproError(f"the margin ({margin_s:g} s) must be positive and under the time limit ({limit_s:g} s)")
    discard_request(job.run_dir)  # a request of an earlier job is stale, as the Slurm script's start says
    events = Events()
    handlers = {
        signal.SIGUSR1: lambda *_: setattr(events, "warn", True),
        signal.SIGALRM: lambda *_: setattr(events, "end", True),
        signal.SIGTERM: lambda signum, _frame: setattr(events, "cancel", events.cancel or signum),
        signal.SIGINT: lambda signum, _frame: setattr(events, "cancel", events.cancel or signum),
    }
    previous = {s: signal.signal(s, h) for s, h in handlers.items()}
    started = _now()
    live: dict[str, Any] = {
        "job_id": job.job_id,
        "allocation": job.allocation,
        "max_allocations": job.max_allocations,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": started,
        "limit_s": limit_s,
        "margin_s": margin_s,
    }
    live_path = job.run_dir / LIVE_FILE
    print(
        f"repro: job {job.job_id}, allocation {job.allocation} of at most {job.max_allocations}: time limit "
        f"{limit_s:g} s, the trainer asked to stop {margin_s:g} s before it",
        flush=True,
    )
    try:
        # the attempt records its allocation, which `repro status` pairs with this job's line in deadlines.jsonl
        env = {**os.environ, ALLOCATION_ENV: str(job.allocation)}
        proc = subprocess.Popen(list(command), preexec_fn=_own_group_ending_with(os.getpid()), env=env)
    except OSError as exc:
        for s, h in previous.items():
            signal.signal(s, h)
        raise ReproError(f"cannot start {command[0]}: {exc}") from None
    live["cell_pgid"] = proc.pid

    def record(change: dict[str, Any]) -> None:
        live.update(change)
        write_text(live_path, json.dumps(live) + "\n")

    try:
        record({})
        outcome = supervise(
            _Process(proc),
            job,
            limit_s,
            margin_s,
            events=events,
            signal_group=_signal_group(proc.pid),
            kill_wait_s=kill_wait_s,
            say=lambda line: print(line, flush=True),
            on_change=record,
        )
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        live_path.unlink(missing_ok=True)
    line = {
        "job_id": job.job_id,
        "allocation": job.allocation,
        "max_allocations": job.max_allocations,
        "started": started,
        "ended": _now(),
        "limit_s": limit_s,
        "margin_s": margin_s,
        "ended_by": outcome.ended_by,
        "cell_exit": outcome.cell_exit,
        "exit": outcome.exit_code,
        "warned_s": outcome.warned_s,
        "terminated_s": outcome.terminated_s,
        "killed_s": outcome.killed_s,
    }
    with open(job.run_dir / LOG_FILE, "a") as handle:
        handle.write(json.dumps(line) + "\n")
    print(f"repro: job {job.job_id} ended: {outcome.ended_by} (the cell exited {outcome.cell_exit})", flush=True)
    if outcome.exit_code == STOPPED_EXIT and job.allocation >= job.max_allocations:
        print(f"repro: allocation {job.allocation} was the last of {job.max_allocations}; the run stays interrupted")
    return outcome.exit_code


def job_log(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The lines of RUN/deadlines.jsonl, oldest first (a torn last line is skipped)."""
    return read_records(Path(run_dir) / LOG_FILE)


def live_record(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The running job's RUN/.deadline.json, or None (no job under a limit running, or it is being rewritten)."""
    try:
        data = json.loads((Path(run_dir) / LIVE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


USAGE = (
    "usage: python -m repro.launch.deadline RUN_DIR --time SECONDS --margin SECONDS [--allocation N] "
    "[--max-allocations M] [--kill-wait SECONDS] -- COMMAND..."
)


def _parse(args: list[str]) -> tuple[Job, float, float, float, list[str]]:
    if "--" not in args or args.index("--") < 1:
        raise ReproError(USAGE)
    cut = args.index("--")
    head, command = args[:cut], args[cut + 1 :]
    run_dir, flags = head[0], head[1:]
    names = {"--time", "--margin", "--allocation", "--max-allocations", "--kill-wait"}
    if len(flags) % 2 or any(name not in names for name in flags[::2]):
        raise ReproError(f"unknown or incomplete options {' '.join(flags)}; {USAGE}")
    values = dict(zip(flags[::2], flags[1::2], strict=True))
    try:
        limit_s, margin_s = float(values["--time"]), float(values["--margin"])
        kill_wait_s = float(values.get("--kill-wait", KILL_WAIT_S))
        allocation = int(values.get("--allocation", 1))
        most = int(values.get("--max-allocations", DEFAULT_MAX_ALLOCATIONS))
    except KeyError as exc:
        raise ReproError(f"{exc.args[0]} is required; {USAGE}") from None
    except ValueError as exc:
        raise ReproError(f"not a number: {exc}") from None
    job = Job(Path(run_dir), os.environ.get(JOB_ID_ENV) or None, allocation, most)
    return job, limit_s, margin_s, kill_wait_s, command


def main(args: Sequence[str] | None = None) -> int:
    try:
        job, limit_s, margin_s, kill_wait_s, command = _parse(list(sys.argv[1:] if args is None else args))
        return run(command, job, limit_s, margin_s, kill_wait_s)
    except ReproError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
