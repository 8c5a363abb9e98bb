"""Where one cell stands, from its run folder and, while its job is queued or has just ended, from the
scheduler that has the job. The run folder wins whenever it knows (a finished run is finished, a locked
run is running); the scheduler fills the gaps the folder cannot see: a job waiting in the queue, or a
job that died before `repro run` could write anything (a bad node, a time limit, scancel)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.errors import ReproError
from repro.launch.jobs import ACTIVE, JobState, Scheduler, last_job
from repro.rundir import RunDir

CELL_STATES = ("pending", "queued", "running", "finished", "failed", "interrupted", "cancelled", "unknown")


@dataclass(frozen=True)
class CellState:
    state: str  # one of CELL_STATES
    reason: str = ""
    job: dict[str, Any] | None = None  # the last submission, if any
    attempts: int = 0

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")


def scheduler_for(record: dict[str, Any]) -> Scheduler | None:
    """The scheduler that owns a job record (Ray records carry their cluster's address)."""
    launcher = record.get("launcher")
    if launcher == "slurm":
        from repro.launch.slurm import SlurmScheduler

        return SlurmScheduler()
    if launcher == "ray":
        from repro.launch.ray_jobs import RayScheduler

        return RayScheduler(address=record.get("address") or "http://127.0.0.1:8265")
    return None


def _job_name(job: dict[str, Any]) -> str:
    return f"{job.get('launcher')} job {job.get('job_id')}"


def _output_tail(job: dict[str, Any], run_dir: Path) -> str:
    """The last line the job printed: Slurm's output file, or Ray's job logs."""
    text = ""
    if job.get("launcher") == "slurm":
        out = run_dir / "slurm" / f"slurm-{job.get('job_id')}.out"
        try:
            text = out.read_text(errors="replace")
        except OSError:
            return ""
    elif job.get("launcher") == "ray":
        from repro.launch.ray_jobs import RayScheduler

        text = RayScheduler(address=job.get("address") or "").logs(job)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _stopped_at_limit(owner: Scheduler | None, job: dict[str, Any]) -> bool:
    """Whether the job ended at a time limit its scheduler does not requeue (Ray under repro.launch.deadline): an
    interruption to continue, not a failure, even when the limit came before `repro run` began its attempt."""
    ask = getattr(owner, "stopped_for_continuation", None)
    return bool(ask is not None and ask(job))


def cell_state(run_dir: str | Path, *, ask_scheduler: bool = True, scheduler: Scheduler | None = None) -> CellState:
    run_dir = Path(run_dir)
    job = last_job(run_dir) if run_dir.is_dir() else None
    if not run_dir.exists():
        return CellState("pending")
    run = RunDir(run_dir)
    try:
        run_state = run.state
        attempts = run.status().get("attempts") or []
    except ReproError as exc:
        return CellState("unknown", str(exc), job)
    last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
    n = len(attempts)
    if run_state == "finished":
        return CellState("finished", "", job, n)
    if run_state == "running":
        where = f"pid {last.get('pid')} on {last.get('host', '?')}"
        if last.get("job_id"):
            where = f"{last.get('launcher')} job {last['job_id']}, {where}"
        return CellState("running", where, job, n)
    error = str(last.get("error") or "")
    if job is not None and ask_scheduler:
        owner = scheduler if scheduler is not None and scheduler.name == job.get("launcher") else scheduler_for(job)
        js = owner.state(job) if owner is not None else JobState("unknown", "no scheduler for this record")
        started = any(a.get("job_id") == job.get("job_id") for a in attempts if isinstance(a, dict))
        if js.state in ACTIVE:
            return CellState(js.state, f"{_job_name(job)} {js.detail}".strip(), job, n)
        if js.state == "cancelled":
            return CellState("cancelled", f"{_job_name(job)} was cancelled", job, n)
        if js.state in ("failed", "finished") and (run_state == "pending" or not started or not error):
            if js.state == "failed" and _stopped_at_limit(owner, job):  # a Ray job whose limit came first
                why = f"{_job_name(job)} reached its time limit before its attempt began or recorded its end"
                return CellState("interrupted", f"{why}; launched again, it resumes from its last checkpoint", job, n)
            tail = _output_tail(job, run_dir)
            why = f"{_job_name(job)} ended {js.detail or js.state}" + (f": {tail}" if tail else "")
            return CellState("failed", why, job, n)
    if run_state in ("failed", "interrupted"):
        reason = error or "stopped mid-run; `repro run` (or the sweep) again resumes it"
        return CellState(run_state, reason, job, n)
    return CellState(run_state, "", job, n)
