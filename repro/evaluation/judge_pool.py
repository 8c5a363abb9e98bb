"""Answers compared with references in worker processes, each comparison under a hard time limit.

math-verify's own timeouts use `signal.alarm`: they only work in the main thread and cannot stop a hang
inside C code, and Qwen2.5-Math's `math_equal` (whose sympy calls can hang too) has no limit at all.
Evaluation grades hundreds of thousands of responses and verl calls the training reward in executor
threads, so one pathological answer must stall neither. `JudgePool` runs the comparison
(`repro.verifier.judge` for the math-verify modes, the very function the training reward uses in the main
thread, so the two cannot disagree on a normal input; `repro.evaluation.qwen_math.judge` for "qwen-math")
in long-lived worker processes; a call that exceeds `timeout_s` is abandoned by killing the worker, scores
0 with outcome "timeout" (counted, never raised), and the worker is restarted when next needed.

The pool compares answers already taken out of their responses; extracting them is the evaluation
grader's job (`repro.evaluation.grading.Grader`, a `JudgePool` that extracts first). The split lets the
training reward (`repro.reward`) use the workers without importing the grading modes, which build on it.

Workers are started with the "spawn" context (nothing is inherited from a parent that may hold threads,
CUDA or a big heap). As with any spawn-based code, a script that creates a pool at import time needs the
usual `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import wait as _wait
from typing import Self

__all__ = ["MATH_VERIFY_MODES", "OUTCOMES", "Grade", "JudgePool", "Key", "job_key"]

MATH_VERIFY_MODES = ("reward", "boxed")  # the grading modes compared with math-verify (repro.verifier.judge)
OUTCOMES = ("correct", "wrong", "no_boxed", "parse_failed", "timeout", "error")


@dataclass(frozen=True)
class Grade:
    score: float
    outcome: str  # one of OUTCOMES


_NO_BOXED = Grade(0.0, "no_boxed")


class _TimeoutFlag(logging.Handler):
    """Notices math-verify's own timeouts, which it logs as warnings and otherwise swallows."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Timeout during"):
            self.messages.append(message)


def _worker_main(conn, inner_timeout_s: int) -> None:
    """Worker loop: receive a batch [(index, mode, prediction, ground_truth)], send one reply per item.

    Each reply is (index, score, outcome, judged) where `judged` counts the items this process has verified.
    Verification runs in this process's main thread, so math-verify's signal-based timeouts work here; its
    parse/verify timeouts are set to `inner_timeout_s`. math-verify swallows its own timeouts (a timed-out
    parse gives no answer, a timed-out comparison gives False), so they are read from its log and reported
    as "timeout" when the score is 0. "qwen-math" items have no inner limit: only the parent's hard limit.
    """
    import functools

    import math_verify

    from repro import verifier
    from repro.evaluation import qwen_math

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns interruption and kills us on close
    flag = _TimeoutFlag()
    mv_logger = logging.getLogger("math_verify")
    mv_logger.addHandler(flag)
    mv_logger.propagate = False
    # the training reward's own comparison, with the worker's inner timeout and no cache (the parent memoises)
    judge = functools.partial(verifier.judge, timeout=inner_timeout_s, use_cache=False)
    slow_golds: set[str] = set()  # references whose own parse timed out: `_gold` caches the empty result
    judge("1", "1")  # warm up lazy imports so the first real item is not charged for them
    qwen_math.math_equal("x+1", "1+x")  # sympy and latex2sympy too
    judged = 0
    conn.send(("ready", os.getpid()))
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return
        if batch is None:
            return
        for index, mode, prediction, ground_truth in batch:
            flag.messages.clear()
            try:
                if mode in MATH_VERIFY_MODES:
                    score, outcome = judge(prediction, ground_truth)
                else:
                    score, outcome = qwen_math.judge(prediction, ground_truth)
            except (Exception, math_verify.errors.TimeoutException):  # judge already catches; belt and braces
                score, outcome = 0.0, "error"
            if mode in MATH_VERIFY_MODES:
                if f"Timeout during parsing: \\boxed{{{ground_truth}}}" in flag.messages:
                    slow_golds.add(ground_truth)
                if score == 0.0 and (flag.messages or ground_truth in slow_golds):
                    outcome = "timeout"
            judged += 1
            conn.send((index, float(score), outcome, judged))


class _Worker:
    """One worker process and its pipe; started lazily, killed on timeout."""

    def __init__(self, ctx, inner_timeout_s: int, start_timeout_s: float) -> None:
        self._ctx, self._inner, self._start_timeout = ctx, inner_timeout_s, start_timeout_s
        self.proc = None
        self.conn = None
        self.judged = 0  # last count the current process reported
        self.starts = 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def ensure(self) -> None:
        if self.alive():
            return
        self.stop()
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_worker_main, args=(child, self._inner), daemon=True, name="repro-grader")
        proc.start()
        child.close()
        self.proc, self.conn, self.judged = proc, parent, 0
        self.starts += 1
        ready = False
        with contextlib.suppress(EOFError, OSError):
            ready = parent.poll(self._start_timeout) and parent.recv()[0] == "ready"
        if not ready:
            code = proc.exitcode
            self.stop()
            why = (
                f"exited with code {code}" if code is not None else f"was not ready within {self._start_timeout:.0f} s"
            )
            raise RuntimeError(f"grading worker {why} (see its stderr above)")

    def stop(self, graceful: bool = False) -> None:
        if self.proc is not None:
            if graceful and self.proc.is_alive():
                try:
                    self.conn.send(None)
                    self.proc.join(1.0)
                except (OSError, ValueError):
                    pass
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
            self.proc.close()
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn = None, None


Key = tuple[str, str, str]  # (mode, extracted answer, reference as the mode compares it)


def job_key(mode: str, answer: str, ground_truth: str) -> Key:
    """What a comparison is memoised on; the reference is stripped for the math-verify modes and kept raw
    for "qwen-math", as the released code does."""
    reference = str(ground_truth) if mode == "qwen-math" else str(ground_truth).strip()
    return (mode, answer, reference)


class JudgePool:
    """Comparisons of extracted answers with references, each under a hard time limit; memoised, counted.

    `judge(prediction, ground_truth)` compares a boxed content with math-verify, as the training reward
    does. Results are memoised on `job_key` (mode, answer, reference), timeouts included. Each worker is
    sent its share of a call's comparisons as one batch and answers one reply per item, so the time limit
    applies to each item: when an item runs over, only that item scores "timeout", the worker is replaced
    and the rest of the batch continues; finished items are never re-graded. `counts()` tallies outcomes
    over all calls, cache hits included; `worker_calls` is the number of items the workers verified, as
    they report it.

    Not thread-safe: use one pool per thread (each has its own workers).

    `inner_timeout_s` (whole seconds, as signal.alarm wants) is math-verify's own parse/verify limit inside
    the worker; by default half of `timeout_s`, at least 1. `start_timeout_s` bounds a worker's start-up
    (import and warm-up), which is not charged to any item; a worker that cannot start raises RuntimeError.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        workers: int = 1,
        *,
        inner_timeout_s: int | None = None,
        start_timeout_s: float = 120.0,
        mp_context: str = "spawn",
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if mp_context not in ("spawn", "forkserver"):
            raise ValueError(f"mp_context must be 'spawn' or 'forkserver', got {mp_context!r}")
        self.timeout_s = float(timeout_s)
        inner = max(1, int(timeout_s // 2)) if inner_timeout_s is None else int(inner_timeout_s)
        ctx = mp.get_context(mp_context)
        self._workers = [_Worker(ctx, inner, start_timeout_s) for _ in range(workers)]
        self._memo: dict[Key, Grade] = {}
        self._counts: collections.Counter[str] = collections.Counter()
        self.worker_calls = 0
        self._closed = False

    # -- public API ---------------------------------------------------------------------------------------

    def judge(self, prediction: str, ground_truth: str) -> Grade:
        """The grade of an answer already taken out of its box: verifies `prediction` (a boxed content) as
        is, with math-verify. `repro.reward.compute_score` uses it off the main thread, where it has no
        other time limit."""
        return self._grade_keys([job_key("reward", prediction.strip(), ground_truth)])[0]

    def _grade_keys(self, keys: list[Key | None]) -> list[Grade]:
        """Grades for (mode, answer, reference) keys, None meaning "no answer"; memoised, counted."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        todo: dict[Key, None] = {}  # unseen keys, first-seen order, deduplicated
        for key in keys:
            if key is not None and key not in self._memo:
                todo[key] = None
        if todo:
            jobs = list(todo)
            for key, grade in zip(jobs, self._run(jobs), strict=True):
                self._memo[key] = grade
        grades = [_NO_BOXED if key is None else self._memo[key] for key in keys]
        self._counts.update(g.outcome for g in grades)
        return grades

    def counts(self) -> collections.Counter[str]:
        return collections.Counter(self._counts)

    @property
    def worker_starts(self) -> int:
        """Worker processes started so far (1 per worker, plus one per restart after a timeout or crash)."""
        return sum(w.starts for w in self._workers)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w in self._workers:
            w.stop(graceful=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- internals ----------------------------------------------------------------------------------------

    def _run(self, jobs: list[Key]) -> list[Grade]:
        """Verify unique (mode, prediction, reference) jobs across the workers with a per-item hard limit."""
        results: list[Grade | None] = [None] * len(jobs)
        n = min(len(self._workers), len(jobs))
        size = -(-len(jobs) // n)
        queues = {
            w: collections.deque(range(i * size, min((i + 1) * size, len(jobs))))
            for i, w in enumerate(self._workers[:n])
        }
        queues = {w: q for w, q in queues.items() if q}
        deadlines: dict[_Worker, float] = {}

        def dispatch(w: _Worker) -> None:
            w.ensure()
            w.conn.send([(i, *jobs[i]) for i in queues[w]])
            deadlines[w] = time.monotonic() + self.timeout_s

        def receive(w: _Worker) -> None:
            try:
                index, score, outcome, judged = w.conn.recv()
            except (EOFError, OSError):  # the worker died (e.g. killed for memory): its current item errs
                finish(w, queues[w].popleft(), Grade(0.0, "error"), restart=True)
                return
            assert index == queues[w][0], "grading worker replied out of order"
            self.worker_calls += judged - w.judged
            w.judged = judged
            finish(w, queues[w].popleft(), Grade(score, outcome), restart=False)

        def finish(w: _Worker, index: int, grade: Grade, restart: bool) -> None:
            results[index] = grade
            if restart:
                w.stop()
            if not queues[w]:
                del queues[w], deadlines[w]
            elif restart:
                dispatch(w)  # the remaining items go to a fresh process
            else:
                deadlines[w] = time.monotonic() + self.timeout_s

        try:
            for w in list(queues):
                dispatch(w)
            while queues:
                wait_s = min(60.0, max(0.0, min(deadlines.values()) - time.monotonic()))  # select() caps it
                by_conn = {w.conn: w for w in queues}
                for conn in _wait(list(by_conn), wait_s):
                    receive(by_conn[conn])
                now = time.monotonic()
                for w in [w for w in queues if deadlines[w] <= now]:
                    if w.conn.poll(0):  # a reply arrived at the deadline: take it
                        receive(w)
                    else:  # over the limit: abandon the item, replace the process, go on with the rest
                        finish(w, queues[w].popleft(), Grade(0.0, "timeout"), restart=True)
        except BaseException:  # e.g. KeyboardInterrupt: replies still in flight must not reach a later call
            for w in queues:
                w.stop()
            raise
        return [g if g is not None else Grade(0.0, "error") for g in results]
