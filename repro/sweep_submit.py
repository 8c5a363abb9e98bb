"""Sweeps on a batch scheduler (Slurm, Ray): submit what is left, at most N cells in flight, and with
`wait` keep watching, filling free slots and resubmitting failed cells until the grid is done.

Repeating the command is safe: a finished cell is skipped, a cell whose job is queued or running is left
alone, an interrupted or failed one is resubmitted and resumes from its checkpoint. Two sweeps at once
take turns per cell through ``RUNS_ROOT/.launch/<cell>.lock`` (the local launcher's lock), held from the
state check to the job record, so a cell is never submitted twice.

A scheduler whose jobs end at a time limit it does not requeue itself (Ray under `repro.launch.deadline`)
says so through `stopped_for_continuation(record)`: while `wait`ing, such a cell gets its next job as a
continuation of the same submission, up to the scheduler's `max_allocations` jobs in all, without spending
a failure retry (Slurm requeues its own jobs, so it needs neither).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from repro.cell_config import fetch_hub_inputs
from repro.cell_plan import plan_cell, verify_gpu_plans
from repro.errors import ReproError
from repro.launch.jobs import Scheduler, record_job
from repro.launch.local import claim_cell
from repro.launch.plan import CellPlan, CpuOptions, require_stack
from repro.launch.state import CellState, cell_state
from repro.rundir import RunDir
from repro.sweep import Sweep
from repro.weights_cache import fetch_all, fetch_benchmarks, keep_recorded_plan, model_path_of

LAUNCHABLE = ("pending", "failed", "interrupted", "cancelled")


@dataclass
class CellReport:
    name: str
    state: str  # the cell's state when the command returned
    action: str = ""  # what this command did: submitted N, skipped, waiting for a slot, ...
    job_id: str | None = None
    reason: str = ""
    submissions: int = 0
    eval_state: str = "off"  # the evaluation stage (repro.launch.eval_stage.EVAL_STATES)
    eval_action: str = ""
    eval_job_id: str | None = None
    eval_for: set[str] = field(default_factory=set)  # training job ids this command submitted an evaluation after
    allocations: int = 0  # the place of this command's last job in its chain: 1, +1 per continuation
    continuations: int = 0  # jobs this command submitted to continue a cell its time limit stopped (not retries)
    allocations_used: bool = False  # its last job ended at its limit and was the last its submission may take


@dataclass
class SubmitReport:
    runs_root: Path
    cells: list[CellReport] = field(default_factory=list)

    def count(self, state: str) -> int:
        return sum(1 for c in self.cells if c.state == state)

    @property
    def failed(self) -> list[CellReport]:
        return [c for c in self.cells if c.state in ("failed", "unknown")]


def _submit_one(
    plan: CellPlan, scheduler: Scheduler, sweep: Sweep, say: Callable[[str], None] = print, allocation: int = 1
) -> dict:
    """Prepare the run folder (the job's own `repro run` then resumes it), submit, record the job. `allocation`
    is the job's place in its submission's chain of continuations (Ray under a time limit)."""
    if plan.gpu is not None:  # released sets by Hub id: fetched here, where the network is
        fetch_hub_inputs(plan.gpu, plan.cell.backbone)
        plan = keep_recorded_plan(plan, say)  # a run recorded with its weights elsewhere keeps them (and says so)
    RunDir.prepare(plan.run_dir, plan.config, ["repro", "sweep", "run", sweep.name, f"--launcher={scheduler.name}"])
    chain = {"allocation": allocation} if scheduler.name == "ray" else {}
    if sweep.eval is not None and scheduler.name == "ray":  # the training job submits its own evaluation
        from repro.launch.eval_stage import ray_chain, write_request

        write_request(plan.run_dir, sweep.eval, scheduler, sweep.name, _eval_gpus(plan, scheduler))
        record = scheduler.submit(plan, sweep.name, then=ray_chain(plan.run_dir, scheduler.python), **chain)
    else:
        record = scheduler.submit(plan, sweep.name, **chain)
    record_job(plan.run_dir, record)
    return record


def _continues(scheduler: Scheduler, job: dict | None) -> bool:
    """Whether the cell's last job ended at its time limit (or stopped on its warning), so that the cell goes on
    in a new job of the same submission; False for every scheduler that does not say so (Slurm requeues)."""
    ask = getattr(scheduler, "stopped_for_continuation", None)
    return bool(ask is not None and job is not None and job.get("launcher") == scheduler.name and ask(job))


def _eval_gpus(plan: CellPlan, scheduler: Scheduler) -> int:
    if plan.gpu is None:
        return 0
    options = getattr(scheduler, "options", None)
    return int(getattr(options, "gpus_per_node", None) or plan.gpu.gpus_per_node)


def _eval_stage(plan: CellPlan, scheduler: Scheduler, sweep: Sweep, report: CellReport, on_event) -> None:
    """Submit the cell's evaluation when it is due and not already done, queued or running: now when the cell
    is trained, or (Slurm) behind the cell's live training job with afterok. Updates the report's eval fields."""
    from repro.launch.eval_stage import eval_state, record_eval_job, submit_ray_eval, submit_slurm_eval

    spec = sweep.eval
    if spec is None:
        return
    train = cell_state(plan.run_dir, scheduler=scheduler)
    es = eval_state(plan.run_dir, spec, train.state)
    report.eval_state = es.state
    if es.job:
        report.eval_job_id = str(es.job.get("job_id"))
    if es.state in ("done", "not started") or es.active:
        return
    after = None
    if train.state in ("queued", "running") and scheduler.name == "slurm" and train.job:
        after = str(train.job.get("job_id"))
        if after in report.eval_for:
            return
    elif train.state != "finished":
        return
    elif scheduler.name == "ray" and train.job:  # the training job's own chain submits it as its last act
        owner_state = scheduler.state(train.job).state
        if owner_state in ("queued", "running"):
            return
    try:
        if scheduler.name == "slurm":
            record = submit_slurm_eval(plan, spec, scheduler, sweep.name, after)
        elif scheduler.name == "ray":
            record = submit_ray_eval(
                plan.run_dir,
                plan.name,
                spec,
                address=scheduler.address,
                python=scheduler.python,
                gpus=_eval_gpus(plan, scheduler),
                cpus=scheduler.cpu_cell_cpus,
                sweep_name=sweep.name,
                project_dir=scheduler.project_dir,
                home=scheduler.home,
            )
        else:
            return
    except ReproError as exc:
        report.eval_state, report.eval_action = "failed", f"submission failed: {exc}"
        on_event(f"{plan.name}: evaluation submission failed: {exc}")
        return
    record_eval_job(plan.run_dir, record)
    report.eval_for.add(after or "")
    report.eval_job_id = str(record["job_id"])
    report.eval_state = "waiting" if after else "queued"
    report.eval_action = f"submitted after job {after}" if after else "submitted"
    on_event(f"{plan.name}: evaluation {report.eval_action} as {scheduler.name} job {record['job_id']}")


def submit_sweep(
    sweep: Sweep,
    scheduler: Scheduler,
    runs_root: str | os.PathLike[str],
    *,
    options: CpuOptions | None = None,
    max_parallel: int | None = None,
    states: tuple[str, ...] = LAUNCHABLE,
    train: bool = True,
    wait: bool = False,
    retries: int = 1,
    poll: float = 15.0,
    timeout: float | None = None,
    on_event: Callable[[str], None] = lambda _line: None,
    check_stack: bool = True,
) -> SubmitReport:
    """Submit every cell whose state is in `states`; with `wait`, return only when no cell is queued or
    running, each cell submitted at most 1 + `retries` times by this call. A sweep with `eval:` also gets
    each cell's evaluation job (after its training); `train=False` submits only those (`repro sweep eval`)."""
    if max_parallel is not None and max_parallel < 1:
        raise ReproError(f"--max-parallel must be at least 1, got {max_parallel}")
    root = Path(runs_root).absolute()
    plans = [plan_cell(cell, sweep, root, options) for cell in sweep.cells(root)]
    python_bin = getattr(scheduler, "python_bin", None)  # the interpreter the jobs run (default: this one)
    preflights = verify_gpu_plans(plans, sweep, python=str(Path(python_bin) / "python") if python_bin else None)
    if check_stack and train:  # nothing is submitted into an environment that would fail every job on its node
        require_stack(preflights)
    gpu = [p.gpu for p in plans if p.gpu is not None]  # the nodes may have no Hub: their inputs are cached here
    if train and fetch_all([model_path_of(spec.overrides) or "" for spec in gpu], on_event):
        plans = [plan_cell(cell, sweep, root, options) for cell in sweep.cells(root)]  # on the local snapshots
        verify_gpu_plans(plans, sweep, python=str(Path(python_bin) / "python") if python_bin else None)
    if gpu and sweep.eval is not None:
        fetch_benchmarks(sweep.eval, on_event)
    root.mkdir(parents=True, exist_ok=True)
    reports = {p.name: CellReport(p.name, "pending") for p in plans}
    deadline = None if timeout is None else time.monotonic() + timeout
    first = True
    while True:
        states_now: dict[str, CellState] = {p.name: cell_state(p.run_dir, scheduler=scheduler) for p in plans}
        in_flight = sum(1 for s in states_now.values() if s.active)
        for plan in plans:
            report, now_state = reports[plan.name], states_now[plan.name]
            if not train:
                report.state, report.reason = now_state.state, now_state.reason
                _eval_stage(plan, scheduler, sweep, report, on_event)
                continue
            report.state, report.reason = now_state.state, now_state.reason
            if now_state.job:
                report.job_id = str(now_state.job.get("job_id"))
            continuing = False
            if first:
                wanted = now_state.state in states
            else:  # later rounds: retry our own failures, continue jobs ended by their time limit, fill slots;
                # a cancel while we watch is meant
                ended = now_state.state in ("failed", "interrupted", "pending")
                ours = report.submissions > 0 and ended
                continuing = ended and not report.allocations_used and _continues(scheduler, now_state.job)
                wanted = ours or continuing or (report.action == "waiting for a slot" and now_state.state in states)
            if not wanted or report.allocations_used:  # used up: it stays interrupted, as on Slurm
                if first:
                    report.action = {"finished": "skipped", "queued": "left alone", "running": "left alone"}.get(
                        now_state.state, ""
                    )
                continue
            most = int(getattr(scheduler, "max_allocations", 1))
            allocation = 1
            if continuing:  # the job's place in its chain comes from its record: it may be another command's
                allocation = int((now_state.job or {}).get("allocation") or 1) + 1
                if allocation > most:
                    report.allocations_used = True
                    report.action = f"allocation {allocation - 1} was the last of {most}"
                    on_event(f"{plan.name}: stopped at its time limit in allocation {allocation - 1} of {most}; it "
                             "stays interrupted (`repro sweep retry-failed` submits it again)")  # fmt: skip
                    continue
            elif report.submissions > retries:
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
                    record = _submit_one(plan, scheduler, sweep, on_event, allocation=allocation)
                except ReproError as exc:
                    report.state, report.reason, report.action = "failed", str(exc), "submission failed"
                    report.submissions = retries + 1  # a refused submission is not retried
                    report.allocations_used = True  # nor continued
                    on_event(f"{plan.name}: submission failed: {exc}")
                    continue
            report.allocations = allocation
            if continuing:
                report.continuations += 1
                report.action = f"continued (allocation {allocation} of {most})"
            else:
                report.submissions += 1
                report.action = "submitted" if report.submissions == 1 else f"resubmitted ({report.submissions - 1})"
            report.job_id, report.state, report.reason = str(record["job_id"]), "queued", ""
            in_flight += 1
            on_event(f"{plan.name}: {report.action} as {scheduler.name} job {record['job_id']}")
        for plan in plans:
            if train:
                _eval_stage(plan, scheduler, sweep, reports[plan.name], on_event)
        first = False
        if not wait:
            break
        active = [r for r in reports.values() if r.state in ("queued", "running")]
        retryable = [
            r
            for r in reports.values()
            if r.state in ("failed", "interrupted", "pending")
            and r.submissions
            and r.submissions <= retries
            and not r.allocations_used
        ]
        waiting = [r for r in reports.values() if r.action == "waiting for a slot" and r.state in LAUNCHABLE]
        evaluating = [r for r in reports.values() if r.eval_state in ("waiting", "queued", "running")]
        if sweep.eval is not None and not active:  # training done: is any evaluation still due?
            evaluating += [r for r in reports.values() if r.state == "finished" and r.eval_state == "pending"]
        if not active and not retryable and not waiting and not evaluating:
            break
        if deadline is not None and time.monotonic() > deadline:
            on_event(f"gave up waiting after {timeout:.0f}s; jobs keep running, `repro status` follows them")
            break
        time.sleep(poll)
    return SubmitReport(root, [reports[p.name] for p in plans])
