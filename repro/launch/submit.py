"""Sweeps on a batch scheduler (Slurm, Ray): submit what is left, at most N cells in flight, and with
`wait` keep watching, filling free slots and resubmitting failed cells until the grid is done.

Repeating the command is safe: a finished cell is skipped, a cell whose job is queued or running is left
alone, an interrupted or failed one is resubmitted and resumes from its checkpoint. Two sweeps at once
take turns per cell through ``RUNS_ROOT/.launch/<cell>.lock`` (the local launcher's lock), held from the
state check to the job record, so a cell is never submitted twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from repro.cell_config import fetch_hub_inputs
from repro.errors import ReproError
from repro.launch.jobs import Scheduler, record_job
from repro.launch.local import claim_cell
from repro.launch.plan import CellPlan, CpuOptions, plan_cell, verify_gpu_plans
from repro.launch.state import CellState, cell_state
from repro.rundir import RunDir
from repro.sweep import Sweep

LAUNCHABLE = ("pending", "failed", "interrupted", "cancelled")


@dataclass
class CellReport:
    name: str
    state: str  # the cell's state when the command returned
    action: str = ""  # what this command did: submitted N, skipped, waiting for a slot, ...
    job_id: str | None = None
    reason: str = ""
    submissions: int = 0


@dataclass
class SubmitReport:
    runs_root: Path
    cells: list[CellReport] = field(default_factory=list)

    def count(self, state: str) -> int:
        return sum(1 for c in self.cells if c.state == state)

    @property
    def failed(self) -> list[CellReport]:
        return [c for c in self.cells if c.state in ("failed", "unknown")]


def _submit_one(plan: CellPlan, scheduler: Scheduler, sweep: Sweep) -> dict:
    """Prepare the run folder (the job's own `repro run` then resumes it), submit, record the job."""
    if plan.gpu is not None:  # released sets by Hub id: fetched here, where the network is
        fetch_hub_inputs(plan.gpu, plan.cell.backbone)
    RunDir.prepare(plan.run_dir, plan.config, ["repro", "sweep", "run", sweep.name, f"--launcher={scheduler.name}"])
    record = scheduler.submit(plan, sweep.name)
    record_job(plan.run_dir, record)
    return record


def submit_sweep(
    sweep: Sweep,
    scheduler: Scheduler,
    runs_root: str | os.PathLike[str],
    *,
    options: CpuOptions | None = None,
    max_parallel: int | None = None,
    states: tuple[str, ...] = LAUNCHABLE,
    wait: bool = False,
    retries: int = 1,
    poll: float = 15.0,
    timeout: float | None = None,
    on_event: Callable[[str], None] = lambda _line: None,
) -> SubmitReport:
    """Submit every cell whose state is in `states`; with `wait`, return only when no cell is queued or
    running, each cell submitted at most 1 + `retries` times by this call."""
    if max_parallel is not None and max_parallel < 1:
        raise ReproError(f"--max-parallel must be at least 1, got {max_parallel}")
    root = Path(runs_root).absolute()
    root.mkdir(parents=True, exist_ok=True)
    plans = [plan_cell(cell, sweep, root, options) for cell in sweep.cells()]
    verify_gpu_plans(plans, sweep)
    reports = {p.name: CellReport(p.name, "pending") for p in plans}
    deadline = None if timeout is None else time.monotonic() + timeout
    first = True
    while True:
        states_now: dict[str, CellState] = {p.name: cell_state(p.run_dir, scheduler=scheduler) for p in plans}
        in_flight = sum(1 for s in states_now.values() if s.active)
        for plan in plans:
            report, now_state = reports[plan.name], states_now[plan.name]
            report.state, report.reason = now_state.state, now_state.reason
            if now_state.job:
                report.job_id = str(now_state.job.get("job_id"))
            if first:
                wanted = now_state.state in states
            else:  # later rounds: retry our own failures, fill slots; a cancel while we watch is meant
                ours = report.submissions > 0 and now_state.state in ("failed", "interrupted", "pending")
                wanted = ours or (report.action == "waiting for a slot" and now_state.state in states)
            if not wanted:
                if first:
                    report.action = {"finished": "skipped", "queued": "left alone", "running": "left alone"}.get(
                        now_state.state, ""
                    )
                continue
            if report.submissions > retries:
                continue
            if max_parallel is not None and in_flight >= max_parallel:
                report.action = "waiting for a slot"
                continue
            with claim_cell(root, plan.name) as fd:
                if fd is None:
                    report.action = "claimed by another sweep"
                    continue
                again = cell_state(plan.run_dir, scheduler=scheduler)  # re-check under the lock
                if again.state not in LAUNCHABLE:
                    report.state, report.reason, report.action = again.state, again.reason, "left alone"
                    continue
                try:
                    record = _submit_one(plan, scheduler, sweep)
                except ReproError as exc:
                    report.state, report.reason, report.action = "failed", str(exc), "submission failed"
                    report.submissions = retries + 1  # a refused submission is not retried
                    on_event(f"{plan.name}: submission failed: {exc}")
                    continue
            report.submissions += 1
            report.job_id, report.state, report.reason = str(record["job_id"]), "queued", ""
            report.action = "submitted" if report.submissions == 1 else f"resubmitted ({report.submissions - 1})"
            in_flight += 1
            on_event(f"{plan.name}: {report.action} as {scheduler.name} job {record['job_id']}")
        first = False
        if not wait:
            break
        active = [r for r in reports.values() if r.state in ("queued", "running")]
        retryable = [
            r
            for r in reports.values()
            if r.state in ("failed", "interrupted", "pending") and r.submissions and r.submissions <= retries
        ]
        waiting = [r for r in reports.values() if r.action == "waiting for a slot" and r.state in LAUNCHABLE]
        if not active and not retryable and not waiting:
            break
        if deadline is not None and time.monotonic() > deadline:
            on_event(f"gave up waiting after {timeout:.0f}s; jobs keep running, `repro status` follows them")
            break
        time.sleep(poll)
    return SubmitReport(root, [reports[p.name] for p in plans])
