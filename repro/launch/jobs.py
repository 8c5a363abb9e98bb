"""Scheduler jobs as a run folder records them, and the one interface every batch scheduler implements.

``<run>/jobs.jsonl`` gets one line per submission (launcher, job id, when, by which sweep); the attempts
in status.json carry the same job id once the job starts, so a run folder tells which job made which
attempt, and `repro status` / `repro cancel` know which scheduler to ask about a cell.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from repro.atomic import append_lines, fsync_dir, read_records
from repro.launch.plan import CellPlan

JOBS_FILE = "jobs.jsonl"
JOB_STATES = ("queued", "running", "finished", "failed", "cancelled", "unknown")
ACTIVE = ("queued", "running")


@dataclass(frozen=True)
class JobState:
    state: str  # one of JOB_STATES
    detail: str = ""  # the scheduler's own word for it (PENDING, TIMEOUT, ...) or its error


class Scheduler(Protocol):
    """A batch scheduler the sweep driver can submit cells to (Slurm, a Ray cluster's Jobs API)."""

    name: str

    def check(self) -> None:
        """Raise ReproError (one line: what is missing, and the fix) when the scheduler cannot be used."""
        ...

    def submit(self, plan: CellPlan, sweep_name: str) -> dict[str, Any]:
        """Start the cell's job; return the record to append to jobs.jsonl (must hold "job_id")."""
        ...

    def state(self, record: dict[str, Any]) -> JobState: ...

    def cancel(self, record: dict[str, Any]) -> None: ...


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def record_job(run_dir: str | os.PathLike[str], record: dict[str, Any], file: str = JOBS_FILE) -> None:
    """Append one submission, fsynced, so a crash right after `sbatch` still leaves the job id on disk
    (training jobs in jobs.jsonl; the evaluation stage's in eval-jobs.jsonl)."""
    path = Path(run_dir) / file
    existed = path.exists()
    with open(path, "a") as handle:
        append_lines(handle, [json.dumps(record, sort_keys=True)])
    if not existed:
        fsync_dir(path.parent)


def job_records(run_dir: str | os.PathLike[str], file: str = JOBS_FILE) -> list[dict[str, Any]]:
    """Every submission of a run, oldest first; a torn last line (a crash mid-append) is ignored."""
    return read_records(Path(run_dir) / file, needs="job_id")


def last_job(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    records = job_records(run_dir)
    return records[-1] if records else None
