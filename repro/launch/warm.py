"""Warm workers: the local launcher's `python -m repro.cli run|eval ...` processes forked from a process that has
already imported what they import, so a sweep pays the imports (torch, transformers, verl, math-verify: ~10 s
of CPU) once per kind of process, not once per cell.

A worker ("zygote") is `python -m repro.launch.warm FD MODULE...`, started by the launcher with the very python,
working directory and environment its processes are to get (one worker per distinct triple: a sweep's cells
share one, its evaluations another, since `repro eval` gets OMP_NUM_THREADS too, which libgomp reads when it
loads). It pins the arithmetic first (`repro.arithmetic.pin`, as repro/cli.py does), imports the MODULEs by name
and runs no torch op (no thread pool exists to be lost in a fork). Then, single-threaded, it serves requests over
the Unix socket FD: each request carries the command's module (or script) and arguments and, as SCM_RIGHTS, the
files for stdout and stderr and the fds the process keeps (the cell's launch lock). It forks; the child puts those
files on fds 1 and 2 (stdin is /dev/null, as the worker's own), keeps the lock fd at the launcher's number, drops
the worker's socket, seeds numpy's and torch's global generators anew (a cold process seeds both from the OS when
they load; Python's `random` reseeds itself in a fork), unblocks the signals the worker holds and runs the module
as `python -m` runs it (`runpy`, `__main__`, sys.argv). Its exit is the interpreter's (SystemExit's code, atexit
handlers, flushed streams, SIGINT on an uncaught Ctrl-C) without the teardown of every module (`_quick_exit`).
The worker is its parent: it reaps it (a pidfd per child) and reports its pid when it starts and its exit code
when it ends, a negative signal number when a signal killed it, as `subprocess` does.

The worker keeps SIGTERM, SIGINT and SIGHUP blocked (its children unblock them): the sweep's process group getting
a TERM interrupts each cell as before, and the worker outlives it to reap them; it exits when the launcher's end
of the socket closes (the launcher finished or died) and its last child has ended.

The launcher's side (`WarmWorkers.popen`) returns an object with `pid` and `wait()` like `subprocess.Popen`, and
falls back to `subprocess.Popen` itself, with one warning line, when a worker cannot start or has died:
a sweep never fails because of the optimisation. REPRO_WARM_WORKERS=0 switches the workers off.

The worker imports modules of any layer, by the names the launcher gives on its command line, as the launcher
names `repro.cli` in the command it runs: a process boundary, not an import the layers check.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro import arithmetic

WARM_ENV = "REPRO_WARM_WORKERS"  # 0: every process of a local sweep starts cold, as `subprocess.Popen`
READY_TIMEOUT_S = 300.0  # a worker's imports on a loaded 2-core machine take 10-30 s
BLOCKED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # held by the worker, unblocked in each child
MAX_MESSAGE = 1 << 16
MAX_FDS = 8

# What a worker imports before it serves, by the command it serves (python -m MODULE COMMAND ...): the modules that
# command imports for a CPU cell, in the order it does (repro.cli's own imports, then the lazy ones; a GPU cell's
# `repro run`, which starts verl in a process of its own, imports fewer). A module missing here is imported by
# each child as before; a module named here that is gone leaves the worker unable to start (the launcher starts
# its processes cold then, with one warning line).
PRELOAD: dict[tuple[str, str], tuple[str, ...]] = {
    ("repro.cli", "run"): ("repro.cli", "repro.local.weights", "repro.local.trainer", "math_verify"),
    ("repro.cli", "eval"): (
        "repro.cli",
        "repro.evaluation.generation",
        "repro.evaluation.grading",
        "repro.evaluation.metrics",
        "repro.evaluation.shards",
        "repro.local.generate",
        "repro.local.model",
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


def _send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


# ---- the worker -------------------------------------------------------------------------------------------


@dataclass
class _Request:
    message: dict[str, Any]
    fds: list[int]
    sock: socket.socket


def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3: the loop polls instead
        return None


def _serve(sock: socket.socket) -> _Request | None:
    """The worker's loop: fork a child per request, reap children, report both. Returns None in the worker
    when the launcher has gone and no child is left, and the request in each child."""
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, None)
    children: dict[int, tuple[Any, int | None]] = {}  # pid -> (request id, pidfd)
    listening = True

    def report(message: dict[str, Any]) -> None:
        nonlocal listening
        if not listening:
            return
        try:
            _send(sock, message)
        except OSError:  # the launcher is gone: serve no more, reap what is left
            listening = False
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(sock)

    def reap(pid: int, status: int) -> None:
        rid, pidfd = children.pop(pid)
        if pidfd is not None:
            selector.unregister(pidfd)
            os.close(pidfd)
        report({"id": rid, "pid": pid, "code": os.waitstatus_to_exitcode(status)})

    while listening or children:
        polling = any(pidfd is None for _, pidfd in children.values())
        for key, _ in selector.select(0.2 if polling else None):
            if key.data is not None:  # a child's pidfd: it has ended
                reap(key.data, os.waitpid(key.data, 0)[1])
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
            except OSError:
                data, fds = b"", []
            if not data or not listening:  # the launcher closed its end, or died
                listening = False
                with contextlib.suppress(KeyError, ValueError):
                    selector.unregister(sock)
                for fd in fds:
                    os.close(fd)
                continue
            message = json.loads(data)
            if threading.active_count() > 1:  # a fork would copy a half-held lock: the launcher starts it cold
                for fd in fds:
                    os.close(fd)
                report({"id": message["id"], "error": f"the worker runs {threading.active_count()} threads"})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as exc:
                for fd in fds:
                    os.close(fd)
                report({"id": message["id"], "error": f"fork: {exc}"})
                continue
            if pid == 0:
                for _, pidfd in children.values():
                    if pidfd is not None:
                        os.close(pidfd)
                selector.close()
                return _Request(message, fds, sock)
            for fd in fds:  # the child's now; the worker must not hold the cell's lock or its logs
                os.close(fd)
            pidfd = _pidfd(pid)
            children[pid] = (message["id"], pidfd)
            if pidfd is not None:
                selector.register(pidfd, selectors.EVENT_READ, pid)
            report({"id": message["id"], "pid": pid})
        if polling:
            for pid in [p for p, (_, pidfd) in children.items() if pidfd is None]:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    reap(pid, status)
    selector.close()
    return None


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


TORCH_FIXED_SEED = 67280421310721  # the default generator's seed in torch releases that did not draw one


def _reseed() -> None:
    """The global generators a cold process seeds from the OS when their library loads, seeded anew in a child, as
    each cold process has its own: numpy's legacy one, and torch's default one (torch 2.x draws its seed when it
    loads; an older torch's fixed seed is left as it is). Python's `random` reseeds itself in a fork."""
    numpy = sys.modules.get("numpy.random")
    if numpy is not None:
        numpy.seed()
    torch = sys.modules.get("torch")
    generator = getattr(torch, "default_generator", None)
    if generator is not None and generator.initial_seed() != TORCH_FIXED_SEED:
        generator.seed()


def _become(request: _Request, mask: set[int]) -> None:
    """In the child, before the command: its files on fds 1 and 2, its kept fds, its directory, argv, signals."""
    message, fds = request.message, request.fds
    request.sock.close()
    out, err, *kept = fds
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (out, err):
        if fd > 2:
            os.close(fd)
    for want, fd in zip(message["keep"], kept, strict=True):  # at the launcher's number, as pass_fds keeps it
        if fd != want and not _fd_open(want):
            os.dup2(fd, want, inheritable=True)
            os.close(fd)
        else:
            os.set_inheritable(fd, True)
    os.chdir(message["cwd"])
    _reseed()
    how, what, args = message["how"], message["what"], message["args"]
    sys.argv = [what, *args]
    if how == "path":  # what `python SCRIPT` puts first on sys.path; `-m` puts the working directory (the worker's)
        sys.path[0] = os.path.dirname(os.path.realpath(what))
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def serve_main(args: Sequence[str]) -> int:
    """`python -m repro.launch.warm FD MODULE...`: import the MODULEs, then serve the launcher on FD."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)  # before anything else: a TERM waits for the loop
    arithmetic.pin()
    sock = socket.socket(fileno=int(args[0]))
    started = time.perf_counter()
    for name in args[1:]:
        importlib.import_module(name)
    seconds = time.perf_counter() - started
    print(
        f"repro warm worker {os.getpid()}: imported {', '.join(args[1:])} ({len(sys.modules)} modules) in "
        f"{seconds:.1f}s; {_native_threads()} native threads",
        flush=True,
    )
    try:
        _send(sock, {"ready": True, "pid": os.getpid(), "seconds": round(seconds, 3), "modules": len(sys.modules)})
    except OSError:
        return 0  # the launcher has gone already
    request = _serve(sock)
    if request is None:
        return 0
    _become(request, mask)
    how, what = request.message["how"], request.message["what"]
    # the command's own exit from here on: SystemExit's code, an uncaught exception's traceback and exit 1
    try:
        if how == "module":
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(what, run_name="__main__")
        code: int = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()  # as the interpreter ends on an uncaught Ctrl-C: its traceback, then SIGINT
        _quick_exit(0, then_signal=signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    _quick_exit(code)
    return code  # not reached


def _exit_code(code: object) -> int:
    """The exit status the interpreter gives `sys.exit(code)`: None 0, an int itself, anything else printed, 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _quick_exit(code: int, then_signal: int | None = None) -> None:
    """The interpreter's exit without its teardown: the command's non-daemon threads joined and its atexit
    handlers run (multiprocessing's stops its children there, logging's flushes its handlers), the standard
    streams flushed, then `os._exit`. Tearing down every module and object of a trainer's or an evaluation's
    process (torch, transformers, sympy) took ~0.8 s of CPU each, 90 times in the main job; nothing in it
    writes: the commands close their own files (tests/test_warm_workers.py compares a cell's and its
    evaluation's files with a cold run's)."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if then_signal is not None:
        signal.signal(then_signal, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {then_signal})
        os.kill(os.getpid(), then_signal)
    os._exit(code)


# ---- the launcher's side ----------------------------------------------------------------------------------


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
                    [python, "-m", "repro.launch.warm", str(theirs.fileno()), *preload],
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


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
