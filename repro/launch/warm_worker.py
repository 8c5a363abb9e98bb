"""A warm worker, the process side of repro.launch.warm: a process that has imported what a local sweep's
processes import, and forks each of them on the launcher's request.

A worker ("zygote") is `python -m repro.launch.warm_worker FD MODULE...`, started by the launcher with the very
python, working directory and environment its processes are to get (one worker per distinct triple: a sweep's cells
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
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from repro import arithmetic

BLOCKED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # held by the worker, unblocked in each child
MAX_MESSAGE = 1 << 16
MAX_FDS = 8


def _send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


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
    """`python -m repro.launch.warm_worker FD MODULE...`: import the MODULEs, then serve the launcher on FD."""
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


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
