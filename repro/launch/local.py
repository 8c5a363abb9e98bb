"""The local launcher: every cell of a sweep as a `repro run` subprocess on this machine.

Safe to run again and safe to run twice at once:

* a cell whose run folder is finished is skipped (`repro run` would refuse it anyway);
* before launching a cell the launcher takes a non-blocking exclusive flock on
  ``RUNS_ROOT/.launch/<cell>.lock`` and keeps it until the cell's process ends (the child inherits the
  lock, so it outlives a killed launcher). A cell whose lock is held elsewhere is reported as
  "running elsewhere" and not launched, so two concurrent sweeps launch every cell exactly once;
* each launch is recorded in ``RUNS_ROOT/.launch/<cell>.json`` (launcher, pids, times, exit code) and its
  output in ``<cell>.out`` / ``<cell>.err`` beside it.

Each cell's process (and each evaluation's) is forked from a warm worker that has done the imports once for the
sweep (repro.launch.warm; REPRO_WARM_WORKERS=0 starts each cold, with `subprocess.Popen`, as the workers do when
they cannot start): the same command, pid, logs, lock, environment and signals either way.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from repro import arithmetic
from repro.atomic import write_text
from repro.cell import ResolvedCell
from repro.errors import ReproError
from repro.launch.attempt import THREADS_ENV
from repro.launch.plan import CpuOptions, cpu_argv
from repro.launch.warm import WarmWorkers, enabled
from repro.rundir import RunDir
from repro.sweep import Sweep

LAUNCH_DIR = ".launch"
OUTCOMES = ("finished", "failed", "skipped", "running elsewhere")


@dataclass
class CellOutcome:
    """What happened to one cell in one sweep invocation."""

    cell: ResolvedCell
    name: str
    outcome: str  # one of OUTCOMES
    exit_code: int | None = None
    message: str = ""  # failed: the last stderr line; skipped / running elsewhere: why
    seconds: float = 0.0
    pid: int | None = None  # the `repro run` process, when this invocation launched one
    eval_outcome: str = ""  # the sweep's evaluation stage: done, finished, failed, skipped, running elsewhere
    eval_message: str = ""
    eval_seconds: float = 0.0

    @property
    def launched(self) -> bool:
        return self.pid is not None


@dataclass
class SweepReport:
    runs_root: Path
    outcomes: list[CellOutcome] = field(default_factory=list)

    def by_outcome(self, outcome: str) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.outcome == outcome]

    @property
    def failed(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.outcome == "failed" or o.eval_outcome == "failed"]

    @property
    def launched(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.launched]

    @property
    def ok(self) -> bool:
        return not self.failed


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def launch_dir(runs_root: Path) -> Path:
    return Path(runs_root) / LAUNCH_DIR


def cell_command(
    cell: ResolvedCell, sweep: Sweep, runs_root: Path, extra_args: Sequence[str], python: str
) -> list[str]:
    """The `repro run` command line of one cell (module form, so no console script is needed); GPU cells
    go through `repro run` too, which numbers the attempt and starts verl on this machine."""
    argv = cpu_argv(cell, sweep, runs_root, CpuOptions(), python)
    if not cell.is_cpu:
        argv += ["--preset", sweep.preset]
    if cell.extension is not None:  # a compute-matched long run's cap stands over the command line's --steps
        extra_args = [*extra_args, *cell.extension.args(runs_root / cell.reference_name)]
    return [*argv, *extra_args]


@contextlib.contextmanager
def claim_cell(runs_root: Path, name: str) -> Iterator[int | None]:
    """The cell's launch lock (``RUNS_ROOT/.launch/<cell>.lock``), taken without waiting: yields its fd
    while held, None when another launcher holds it. A child given the fd keeps the cell claimed."""
    launches = launch_dir(runs_root)
    launches.mkdir(parents=True, exist_ok=True)
    fd = os.open(launches / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        try:
            yield fd
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _run_state(path: Path) -> str | None:
    """The run folder's state, None when there is no folder; an unreadable folder counts as "unknown"
    so that `repro run` gets to say what is wrong with it."""
    if not path.exists():
        return None
    try:
        return RunDir(path).state
    except ReproError:
        return "unknown"


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    except FileNotFoundError:
        return ""
    lines = [line for line in lines if line]
    return lines[-1] if lines else ""


def _run_cell(
    cell: ResolvedCell,
    sweep: Sweep,
    runs_root: Path,
    extra_args: Sequence[str],
    python: str,
    threads: int,
    workers: WarmWorkers | None = None,
) -> CellOutcome:
    name = cell.name
    path = runs_root / name
    state = _run_state(path)
    if state == "finished":
        return CellOutcome(cell, name, "skipped", message="already finished")
    if state == "running":
        return CellOutcome(cell, name, "running elsewhere", message="its run folder is locked by a live process")
    with claim_cell(runs_root, name) as fd:
        if fd is None:
            return CellOutcome(cell, name, "running elsewhere", message="another sweep holds its launch lock")
        # re-check under the lock: another sweep may have finished the cell since the first look
        state = _run_state(path)
        if state == "finished":
            return CellOutcome(cell, name, "skipped", message="already finished")
        if state == "running":
            return CellOutcome(cell, name, "running elsewhere", message="its run folder is locked by a live process")
        return _launch(cell, name, sweep, runs_root, extra_args, python, fd, threads, workers)


def _launch(
    cell: ResolvedCell,
    name: str,
    sweep: Sweep,
    runs_root: Path,
    extra_args: Sequence[str],
    python: str,
    lock_fd: int,
    threads: int,
    workers: WarmWorkers | None = None,
) -> CellOutcome:
    launches = launch_dir(runs_root)
    # cells share the cores: torch threads beyond a cell's share spin against each other (8x slower seen)
    env = {**os.environ, "REPRO_LAUNCHER": "local", THREADS_ENV: str(threads)}
    argv = cell_command(cell, sweep, runs_root, extra_args, python)
    out_path, err_path, record_path = (launches / f"{name}{ext}" for ext in (".out", ".err", ".json"))
    record = {
        "cell": name,
        "launcher": "local",
        "host": socket.gethostname(),
        "sweep": sweep.name,
        "sweep_pid": os.getpid(),
        "argv": argv,
        "stdout": str(out_path),
        "stderr": str(err_path),
        "started": _now(),
        "pid": None,
        "ended": None,
        "exit_code": None,
    }
    started = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            # the child inherits the launch lock, so the cell stays claimed even if this launcher dies
            proc = _popen(workers, argv, out, err, env, (lock_fd,))
        except OSError as exc:
            record.update(ended=_now(), exit_code=None, error=str(exc))
            write_text(record_path, json.dumps(record, indent=2) + "\n")
            return CellOutcome(cell, name, "failed", message=f"cannot start {argv[0]}: {exc}")
        record["pid"] = proc.pid
        if getattr(proc, "worker_pid", None):
            record["warm_worker"] = proc.worker_pid  # the process it was forked from (its parent)
        write_text(record_path, json.dumps(record, indent=2) + "\n")
        code = proc.wait()
    seconds = time.perf_counter() - started
    record.update(ended=_now(), exit_code=code, seconds=round(seconds, 3))
    if code is None:  # its warm worker died before it ended: the run folder says how it ended
        code = 0 if _run_state(runs_root / name) == "finished" else 1
        record["note"] = f"exit code unknown (its warm worker ended first); the run folder says exit {code}"
    write_text(record_path, json.dumps(record, indent=2) + "\n")
    if code == 0:
        return CellOutcome(cell, name, "finished", exit_code=0, seconds=seconds, pid=proc.pid)
    message = _last_line(err_path) or f"exited with {code}; see {err_path}"
    return CellOutcome(cell, name, "failed", exit_code=code, message=message, seconds=seconds, pid=proc.pid)


def _popen(workers: WarmWorkers | None, argv: Sequence[str], out, err, env: dict[str, str], pass_fds: tuple[int, ...]):
    """The process of one command, from a warm worker when there are any, else cold."""
    if workers is not None:
        return workers.popen(argv, stdout=out, stderr=err, env=env, pass_fds=pass_fds)
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=pass_fds, env=env)


def _evaluate(
    outcome: CellOutcome, sweep: Sweep, root: Path, python: str, threads: int, workers: WarmWorkers | None = None
) -> None:
    """The cell's evaluation stage, when its training has finished and its records are not complete."""
    from repro.launch.eval_stage import eval_done, eval_running, run_local_eval

    path = root / outcome.name
    if _run_state(path) != "finished":
        outcome.eval_outcome, outcome.eval_message = "skipped", "training has not finished"
        return
    if eval_done(path, sweep.eval)[0]:
        outcome.eval_outcome, outcome.eval_message = "done", "records complete"
        return
    if eval_running(path):
        outcome.eval_outcome, outcome.eval_message = "running elsewhere", "another repro eval holds its lock"
        return
    # the cell's launch lock, as for training: two sweeps that both find a cell trained and not evaluated (one
    # that just trained it, one that reached it after) must not both start its evaluation
    with claim_cell(root, outcome.name) as fd:
        if fd is None:
            outcome.eval_outcome, outcome.eval_message = "running elsewhere", "another sweep holds its launch lock"
            return
        if eval_done(path, sweep.eval)[0]:  # another sweep evaluated it since the first look
            outcome.eval_outcome, outcome.eval_message = "done", "records complete"
            return
        started = time.perf_counter()
        code, tail = run_local_eval(path, sweep.eval, launch_dir(root), python, threads, workers)
    outcome.eval_seconds = time.perf_counter() - started
    if code == 0:
        outcome.eval_outcome = "finished"
    else:
        outcome.eval_outcome = "failed"
        outcome.eval_message = tail or f"repro eval exited with {code}; see {launch_dir(root) / outcome.name}.eval.err"


def run_local(
    sweep: Sweep,
    runs_root: str | os.PathLike[str],
    *,
    max_parallel: int,
    extra_args: Sequence[str] = (),
    python: str = sys.executable,
    only: set[str] | None = None,
    train: bool = True,
) -> SweepReport:
    """Run every unfinished cell of `sweep` as `python -m repro.cli run ...`, at most `max_parallel` at once.

    The children inherit this process's environment (REPRO_HOME included) and working directory;
    `extra_args` (e.g. ``["--steps", "20"]``) are appended to every cell's command. Returns one outcome per
    cell (of `only`, when given: cell names), in the sweep's order, after every launched cell has ended.
    A sweep with `eval:` evaluates each cell right after its training succeeds (or, already trained, at
    once), in the same worker; `train=False` runs only the evaluations of trained cells (`repro sweep eval`).
    """
    if max_parallel < 1:
        raise ReproError(f"--max-parallel must be at least 1, got {max_parallel}")
    root = Path(runs_root).absolute()
    root.mkdir(parents=True, exist_ok=True)
    cells = [c for c in sweep.cells(root) if only is None or c.name in only]
    running = min(max_parallel, max(1, len(cells)))
    threads = max(1, arithmetic.usable_cores() // running)  # each cell's share of the cores
    report = SweepReport(root)
    lock = threading.Lock()  # Popen from several threads is safe; this only orders the results list
    results: dict[int, CellOutcome] = {}
    workers = WarmWorkers(launch_dir(root)) if enabled() else None  # started on first use, closed at the end

    def work(index: int, cell: ResolvedCell) -> None:
        if train:
            outcome = _run_cell(cell, sweep, root, tuple(extra_args), python, threads, workers)
        else:
            name = cell.name
            state = _run_state(root / name)
            outcome = CellOutcome(cell, name, "skipped", message=f"training {state or 'not started'}")
        if sweep.eval is not None:
            _evaluate(outcome, sweep, root, python, threads, workers)
        with lock:
            results[index] = outcome

    try:
        with ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="repro-sweep") as pool:
            futures = [pool.submit(work, i, cell) for i, cell in enumerate(cells)]
            for future in futures:
                future.result()
    finally:
        if workers is not None:
            workers.close()
    report.outcomes = [results[i] for i in range(len(cells))]
    return report
