"""Attempts: every process that trains a run begins one, records what it did, and ends it.

An attempt is one entry of status.json's "attempts" and one metrics file; beginning one takes the lock
and repairs what the previous (maybe killed) attempt left, so a resume never inherits a torn line. Each
record says which checkpoint the attempt resumed from ("resumed_from_step", set by the trainer) and, once it
ends, the last step it logged ("last_logged_step"): the steps between the two are what a later resume
trains again (`repro.launch.allocations`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from repro.rundir.lock import RunLock
from repro.rundir.metrics import RunMetrics, _parse_record, attempt_number, repair_tail
from repro.rundir.status import END_STATES, RunStatus, now

_EDGE_BYTES = 1 << 16  # a verl metrics line is a few kB; read this much at a time from either end


def _edge_step(file: Path, from_end: bool) -> int | None:
    """The step of the first (or last) whole record of a metrics file, reading only its head (or tail),
    so that asking after every attempt of every cell stays cheap on 600-step runs. None: no record."""
    try:
        with open(file, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            span = _EDGE_BYTES
            while True:
                handle.seek(max(0, size - span) if from_end else 0)
                chunk = handle.read(span)
                lines = chunk.split(b"\n")
                everything = len(chunk) == size
                if not everything:  # the cut end of the chunk holds part of a line
                    lines = lines[1:] if from_end else lines[:-1]
                for line in reversed(lines) if from_end else lines:
                    record = _parse_record(line)  # None for a blank or torn line
                    if record is not None:
                        return record[0]
                if everything:
                    return None
                span *= 4
    except OSError:
        return None


def first_logged_step(file: Path) -> int | None:
    return _edge_step(file, from_end=False)


def last_logged_step(file: Path) -> int | None:
    return _edge_step(file, from_end=True)


class RunAttempts(RunStatus, RunLock, RunMetrics):
    """begin / set / end of the attempt this object runs; `_attempt` is its index in status["attempts"]."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        self._attempt: int | None = None

    def begin_attempt(
        self, launcher: str = "local", job_id: str | None = None, extra: dict[str, Any] | None = None
    ) -> Path:
        """Lock the run for this process, repair torn tails, record a new attempt; return its metrics path.

        The lock fd stays open on this object: the kernel drops the lock when the process dies, which is
        how a later `state` tells a crash ("interrupted") from a live run.
        """
        if self._attempt is not None:
            raise RuntimeError(f"{self}: begin_attempt() called twice without end_attempt()")
        self._lock()
        try:
            status = self.status()
            attempts: list[dict] = status.setdefault("attempts", [])
            for old in attempts:  # we hold the lock, so any attempt still marked running is dead
                if old.get("state") == "running":
                    old["state"] = "interrupted"
            files = self.metrics_files()
            repaired = [r for r in (repair_tail(f) for f in files) if r]
            last_file = attempt_number(files[-1]) if files else 0
            n = max([len(attempts), last_file, *(int(a.get("n", 0)) for a in attempts)]) + 1
            record: dict[str, Any] = {
                "n": n,
                "started": now(),
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "launcher": launcher,
                "job_id": job_id,
                "state": "running",
                "resumed_from_step": None,
            }
            if repaired:
                record["repaired"] = repaired
            record.update(extra or {})
            attempts.append(record)
            status["state"] = "running"
            self._write_status(status)
        except BaseException:
            self._release()
            raise
        self._attempt = len(attempts) - 1
        self.metrics_dir.mkdir(exist_ok=True)
        return self.metrics_dir / f"attempt-{n:03d}.jsonl"

    def _current(self, status: dict) -> dict:
        if self._attempt is None or self._lock_fd is None:
            raise RuntimeError(f"{self}: no attempt begun by this process")
        return status["attempts"][self._attempt]

    def set_attempt(self, **fields: Any) -> None:
        """Update the current attempt's record, e.g. ``set_attempt(resumed_from_step=40)``."""
        status = self.status()
        self._current(status).update(fields)
        self._write_status(status)

    def end_attempt(self, state: str, error: str | None = None, **fields: Any) -> None:
        """Close the current attempt as finished / failed / interrupted and release the lock; `fields` join its
        record (e.g. ``moment="saving step 5"``: where the attempt was when it ended)."""
        if state not in END_STATES:
            raise ValueError(f"end state must be one of {END_STATES}, got {state!r}")
        status = self.status()
        attempt = self._current(status)
        last = last_logged_step(self.metrics_dir / f"attempt-{int(attempt['n']):03d}.jsonl")
        attempt.update(state=state, ended=now(), error=error, last_logged_step=last, **fields)
        status["state"] = state
        self._write_status(status)
        self._release()

    def _release(self) -> None:
        """Drop the lock and forget the attempt: this object may begin another."""
        self._unlock()
        self._attempt = None
