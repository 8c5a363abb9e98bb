"""Warm workers: the local launcher's `python -m repro.cli run|eval ...` processes forked from a process that has
already imported what they import, so a sweep pays the imports (torch, transformers, verl, math-verify: ~10 s
of CPU) once per kind of process, not once per cell. The worker itself, and how it forks and reaps each
process, is repro.launch.warm_worker; this is the launcher's side.

The launcher's side (`WarmWorkers.popen`) returns an object with `pid` and `wait()` like `subprocess.Popen`, and
falls back to `subprocess.Popen` itself, with one warning line, when a worker cannot start or has died:
a sweep never fails because of the optimisation. REPRO_WARM_WORKERS=0 switches the workers off.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.launch.warm_worker import MAX_MESSAGE, _send

WARM_ENV = "REPRO_WARM_WORKERS"  # 0: every process of a local sweep starts cold, as `subprocess.Popen`
READY_TIMEOUT_S = 300.0  # a worker's imports on a loaded 2-core machine take 10-30 s

# What a worker imports before it serves, by the command it serves (python -m MODULE COMMAND ...): the modules that
# command imports for a CPU cell, in the order it does (repro.cli's own imports, then the lazy ones; a GPU cell's
# `repro run`, which starts verl in a process of its own, imports fewer). A module missing here is imported by
# each child as before; a module named here that is gone leaves the worker unable to start (the launcher starts
# its processes cold then, with one warning line).
PRELOAD: dict[tuple[str, str], tuple[str, ...]] = {
    ("repro.cli", "run"): ("repro.cli", "repro.cpu_lm.weights", "repro.local.trainer", "math_verify"),
    ("repro.cli", "eval"): (
        "repro.cli",
        "repro.evaluation.backends",
        "repro.evaluation.grading",
        "repro.evaluation.metrics",
        "repro.evaluation.shards",
        "repro.cpu_lm.generate",
        "repro.cpu_lm.model",
        # what TransformersGenerator's AutoModelForCausalLM resolves to (2 s of each evaluation's CPU, measured),
        # and the comparisons its grading worker makes
        "transformers.models.auto.modeling_auto",
        "transformers.models.qwen2.modeling_qwen2",
        "math_verify",
    ),
}


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Warm workers are on unless REPRO_WARM_WORKERS says 0 (or no, off, false); they need fork and fd passing."""
    value = (os.environ if environ is None else environ).get(WARM_ENV, "1").strip().lower()
    supported = hasattr(os, "fork") and hasattr(socket, "send_fds") and hasattr(socket, "AF_UNIX")
    return supported and value not in ("0", "no", "off", "false")


def _target(argv: Sequence[str]) -> tuple[str, str, tuple[str, ...]] | None:
    """(how: "module" or "path", what, its arguments) of `python -m MODULE ARGS` or `python SCRIPT ARGS`."""
    if len(argv) >= 3 and argv[1] == "-m":
        return "module", argv[2], tuple(argv[3:])
    if len(argv) >= 2 and not argv[1].startswith("-"):
        return "path", argv[1], tuple(argv[2:])
    return None


class WarmUnavailable(Exception):
    """The worker cannot start this process: the caller starts it cold."""


@dataclass
class _Pending:
    started: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    pid: int | None = None
    code: int | None = None
    error: str = ""
    lost: bool = False  # the worker died while this child lived: its exit code is unknown


class WarmProcess:
    """A process a worker forked: `pid` and `wait()` as `subprocess.Popen` has them. `wait()` is None when the
    worker died before the process ended (its exit code went with it)."""

    def __init__(self, pid: int, pending: _Pending, worker_pid: int) -> None:
        self.pid = pid
        self.worker_pid = worker_pid
        self._pending = pending
        self.returncode: int | None = None

    def wait(self) -> int | None:
        self._pending.ended.wait()
        if self._pending.lost:
            _wait_gone(self.pid)
        self.returncode = self._pending.code
        return self.returncode


def _wait_gone(pid: int) -> None:
    """Until `pid` (not our child) has ended: gone from /proc, or a zombie nobody reaps."""
    while True:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                    return
        except OSError:
            return
        time.sleep(0.5)


class _Worker:
    """One worker process and the launcher's end of its socket; a reader thread routes its replies."""

    def __init__(self, python: str, env: dict[str, str], cwd: str, preload: Sequence[str], log: Path) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = log
        self.sock = ours
        self.lock = threading.Lock()
        self.pending: dict[int, _Pending] = {}
        self.next_id = 0
        self.ready = threading.Event()
        self.dead = ""  # why it cannot serve, once it cannot
        self.pid = 0
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as handle:
                self.proc = subprocess.Popen(
                    [python, "-m", "repro.launch.warm_worker", str(theirs.fileno()), *preload],
                    stdin=subprocess.DEVNULL,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    pass_fds=(theirs.fileno(),),
                    env=env,
                    cwd=cwd,
                )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.reader = threading.Thread(target=self._read, name="repro-warm-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            try:
                message = json.loads(data)
            except ValueError:
                continue
            if message.get("ready"):
                self.pid = int(message["pid"])
                self.ready.set()
                continue
            with self.lock:
                pending = self.pending.get(message["id"])
                if pending is None:
                    continue
                if "error" in message:
                    pending.error = message["error"]
                    del self.pending[message["id"]]
                    pending.started.set()
                elif "code" in message:
                    pending.code = int(message["code"])
                    del self.pending[message["id"]]
                    pending.ended.set()
                else:
                    pending.pid = int(message["pid"])
                    pending.started.set()
        code = self.proc.wait()
        with self.lock:
            self.dead = self.dead or f"the warm worker exited with {code}{_tail(self.log)}"
            for pending in self.pending.values():
                pending.lost = True
                pending.started.set()
                pending.ended.set()
            self.pending.clear()
        self.ready.set()

    def start(self, how: str, what: str, args: Sequence[str], cwd: str, fds: Sequence[int], keep: Sequence[int]):
        if not self.ready.wait(READY_TIMEOUT_S):
            self.stop(f"the warm worker was not ready after {READY_TIMEOUT_S:.0f}s")
        with self.lock:
            if self.dead:
                raise WarmUnavailable(self.dead)
            self.next_id += 1
            rid, pending = self.next_id, _Pending()
            self.pending[rid] = pending
            message = {"id": rid, "how": how, "what": what, "args": list(args), "cwd": cwd, "keep": list(keep)}
            try:
                _send(self.sock, message, fds)
            except OSError as exc:
                del self.pending[rid]
                raise WarmUnavailable(f"the warm worker does not answer ({exc})") from None
        pending.started.wait()
        if pending.pid is None:  # refused (threads, fork failed), or the worker died before forking it
            raise WarmUnavailable(pending.error or self.dead or "the warm worker died")
        return WarmProcess(pending.pid, pending, self.pid)

    def stop(self, why: str) -> None:
        """No more requests. A worker still importing is killed (it has forked nothing); a serving one is let be,
        to reap and report the children it has, and exits after the last."""
        with self.lock:
            self.dead = self.dead or why
        with contextlib.suppress(OSError):
            if self.ready.is_set():
                self.sock.shutdown(socket.SHUT_WR)
            else:
                self.proc.kill()

    def close(self, timeout: float = 30.0) -> None:
        """No more requests: the worker exits once its last child has ended (it reaps them, not us)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        self.reader.join(timeout=1.0)
        if self.proc.returncode is not None:
            self.sock.close()


def _tail(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {lines[-1][:200]}" if lines else ""


class WarmWorkers:
    """The warm workers of one local sweep, started on first use, one per (python, directory, environment,
    command kind). `popen` starts a process as `subprocess.Popen(argv, stdin=DEVNULL, stdout=, stderr=,
    pass_fds=, env=)` would, forked from a worker when one serves the command, else cold."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self.workers: dict[tuple, _Worker | None] = {}  # None: it failed; that kind starts cold from then on
        self.started: list[_Worker] = []  # every worker, to be closed and reaped at the end
        self.lock = threading.Lock()
        self.warned = False

    def popen(
        self,
        argv: Sequence[str],
        *,
        stdout: Any,
        stderr: Any,
        env: dict[str, str],
        pass_fds: Sequence[int] = (),
        preload: Sequence[str] | None = None,
    ) -> subprocess.Popen | WarmProcess:
        """`preload`: what the worker imports (default: PRELOAD's entry for the command; a command without
        one starts cold)."""
        target = _target(argv)
        if target is None:
            return self._cold(argv, stdout, stderr, env, pass_fds)
        how, what, args = target
        kind = args[0] if how == "module" and args else Path(what).stem  # run, eval; a script's name
        if preload is None:
            preload = PRELOAD.get((what, kind))
        if preload is None:
            return self._cold(argv, stdout, stderr, env, pass_fds)
        cwd = os.getcwd()
        key = (argv[0], cwd, tuple(sorted(env.items())), tuple(preload))
        worker = self._worker(key, argv[0], env, cwd, tuple(preload), kind)
        if worker is not None:
            try:
                return worker.start(*target, cwd, [stdout.fileno(), stderr.fileno(), *pass_fds], pass_fds)
            except WarmUnavailable as exc:
                self._failed(key, str(exc))
        return self._cold(argv, stdout, stderr, env, pass_fds)

    def _worker(self, key: tuple, python: str, env, cwd: str, preload, kind: str) -> _Worker | None:
        with self.lock:
            if key not in self.workers:
                try:
                    self.workers[key] = _Worker(python, env, cwd, preload, self.log_dir / f"warm-{kind}.log")
                    self.started.append(self.workers[key])
                except OSError as exc:
                    self.workers[key] = None
                    self._warn(f"cannot start {python}: {exc}")
            return self.workers[key]

    def _failed(self, key: tuple, why: str) -> None:
        with self.lock:
            worker = self.workers.get(key)
            self.workers[key] = None
            self._warn(why)
        if worker is not None:
            worker.stop(why)

    def _warn(self, why: str) -> None:
        if not self.warned:
            self.warned = True
            print(f"repro: warm workers unavailable ({why}); starting processes cold", file=sys.stderr, flush=True)

    @staticmethod
    def _cold(argv, stdout, stderr, env, pass_fds) -> subprocess.Popen:
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, pass_fds=tuple(pass_fds), env=env
        )

    def close(self) -> None:
        with self.lock:
            workers, self.started = self.started, []
            self.workers = {key: None for key in self.workers}
        for worker in workers:
            worker.close()

    def __enter__(self) -> WarmWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
