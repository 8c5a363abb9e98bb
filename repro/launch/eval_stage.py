"""The evaluation stage of a sweep: `repro eval RUN ...` for each cell once its training has succeeded.

A sweep file's `eval:` (repro.sweep.EvalSpec) says what to evaluate; every launcher runs the same command
(`eval_argv`), started the way its scheduler can wait for training:

* local: right after the cell's `repro run` exits 0, in the same worker (logs beside the cell's in .launch/);
* Slurm: its own job, ``sbatch --dependency=afterok:<training job> --kill-on-invalid-dep=yes``, so it starts
  only when training succeeds (a training job requeued for another allocation keeps its id, so the
  evaluation waits for the final one) and is removed by Slurm when training fails;
* Ray: submitted by the training job itself as its last act (``<train> && python -m repro.launch.eval_stage
  ray-submit RUN``), so no driver has to stay up to watch; a cell trained earlier is submitted directly.

Each submission is a line of ``RUN/eval-jobs.jsonl``. Whether a cell's evaluation is done is read from its
records (``RUN/eval/global_step_<k>/summary.json`` with the asked-for k, benchmarks and grading), never
from a job: a finished evaluation is not submitted again, and a half-written one resumes from its records.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.atomic import write_text
from repro.errors import ReproError
from repro.launch.jobs import ACTIVE, JobState, job_records, now, record_job
from repro.rundir import RunDir
from repro.sweep import EvalSpec

EVAL_JOBS = "eval-jobs.jsonl"
EVAL_REQUEST = "eval-request.json"  # what the Ray training job needs to submit its own evaluation
EVAL_LOCK = ".eval.lock"  # held by a live `repro eval` of the run (repro.evaluation.shards)
EVAL_STATES = ("off", "pending", "waiting", "queued", "running", "done", "partial", "failed", "not started")


@dataclass(frozen=True)
class EvalState:
    state: str  # one of EVAL_STATES
    reason: str = ""
    weighted: float | None = None  # done: the final checkpoint's weighted Ave@k (a fraction)
    job: dict[str, Any] | None = None
    steps: tuple[int, ...] = ()  # done: the evaluated checkpoints

    @property
    def active(self) -> bool:
        return self.state in ("waiting", "queued", "running")


def eval_argv(run_dir: Path, spec: EvalSpec, python: str = "python") -> list[str]:
    return [python, "-m", "repro.cli", "eval", str(run_dir), *spec.eval_args()]


def kept_steps(run_dir: Path) -> list[int]:
    """The run's checkpoints that still hold a model: every save of a verl cell (the older ones slimmed to
    their bf16 weights, repro.rundir.slim), unless the user let verl drop all but its last few."""
    from repro.evaluation.runner import _kept

    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    steps = []
    for p in folder.glob("global_step_*"):
        tail = p.name.removeprefix("global_step_")
        if tail.isdigit() and _kept(p):
            steps.append(int(tail))
    return sorted(steps)


def wanted_steps(run_dir: Path, spec: EvalSpec) -> list[int]:
    kept = kept_steps(run_dir)
    if spec.checkpoints == "all":
        return kept
    if spec.checkpoints == "final":
        return kept[-1:]
    return [int(s) for s in spec.checkpoints.split(",")]


def _tiny(run_dir: Path) -> bool:
    """What `--benchmarks all` means for this run, decided as `repro eval` decides it."""
    from repro import catalog
    from repro.evaluation.runner import tiny_task

    backbone = run_dir.name.split("__")[0]
    return tiny_task(backbone if backbone in catalog.backbones() else None)


def _summary_ok(path: Path, spec: EvalSpec, names: Sequence[str]) -> dict | None:
    """The summary when it holds what `spec` asks for (k, every benchmark, grading), else None."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("k") != spec.k:
        return None
    if summary.get("grading_policy", "released") != spec.grading:
        return None
    have = summary.get("benchmarks") or {}
    return summary if all(name in have for name in names) else None


def eval_done(run_dir: Path, spec: EvalSpec) -> tuple[bool, float | None, tuple[int, ...]]:
    """(done, the last wanted checkpoint's weighted Ave@k, the wanted steps)."""
    from repro.evaluation import benchmarks as bench

    steps = wanted_steps(run_dir, spec)
    if not steps:
        return False, None, ()
    try:
        names = bench.resolve(spec.benchmarks, _tiny(run_dir))
    except ReproError:
        return False, None, tuple(steps)
    weighted = None
    for step in steps:
        summary = _summary_ok(run_dir / "eval" / f"global_step_{step}" / "summary.json", spec, names)
        if summary is None:
            return False, None, tuple(steps)
        weighted = summary.get("weighted_average")
    return True, weighted, tuple(steps)


def eval_running(run_dir: Path) -> bool:
    """A live `repro eval` holds RUN/eval/.eval.lock (the kernel drops it when the process dies)."""
    try:
        fd = os.open(run_dir / "eval" / EVAL_LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def record_eval_job(run_dir: Path, record: dict[str, Any]) -> None:
    record_job(run_dir, record, file=EVAL_JOBS)


def last_eval_job(run_dir: Path) -> dict[str, Any] | None:
    records = job_records(run_dir, file=EVAL_JOBS)
    return records[-1] if records else None


def _log_tail(job: dict[str, Any]) -> str:
    log = job.get("log")
    if not log:
        return ""
    try:
        lines = [line.strip() for line in Path(log).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:240] if lines else ""


def eval_state(run_dir: Path, spec: EvalSpec | None, train_state: str, *, ask_scheduler: bool = True) -> EvalState:
    """Where a cell's evaluation stands; `train_state` is the cell's training state (repro.launch.state)."""
    if spec is None:
        return EvalState("off")
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return EvalState("pending", "training has not started")
    if eval_running(run_dir):
        return EvalState("running", "repro eval holds RUN/eval/.eval.lock", job=last_eval_job(run_dir))
    job = last_eval_job(run_dir)
    if train_state == "finished":
        done, weighted, steps = eval_done(run_dir, spec)
        if done:
            return EvalState("done", f"checkpoints {', '.join(map(str, steps))}", weighted, job, steps)
    if job is None:
        if train_state == "finished":
            return EvalState("pending", "trained; `repro sweep eval SWEEP` submits the evaluation")
        if train_state in ("failed", "cancelled", "unknown"):
            return EvalState("not started", f"training {train_state}")
        return EvalState("pending", "waits for training")
    js = _job_state(job) if ask_scheduler else JobState("unknown", "not asked")
    where = f"{job.get('launcher')} job {job.get('job_id')}"
    log = job.get("log") or ""
    if js.state in ACTIVE:
        if js.state == "queued" and "Dependency" in js.detail:
            return EvalState("waiting", f"{where} waits for training job {job.get('after')}", job=job)
        return EvalState(js.state, f"{where} {js.detail}".strip(), job=job)
    if train_state in ("pending", "queued", "running", "interrupted"):  # trained again after this job
        return EvalState("pending", f"waits for training ({train_state})", job=job)
    if train_state != "finished":
        return EvalState("not started", f"training {train_state}; {where} never ran", job=job)
    if "DependencyNeverSatisfied" in js.detail:  # removed with an earlier training job that failed
        return EvalState("pending", f"trained; {where} was removed with a failed training job", job=job)
    if js.state == "finished":  # the job did what it was asked (--eval-checkpoints final, say): less than this
        wanted = wanted_steps(run_dir, spec)
        have = tuple(s for s in wanted if (run_dir / "eval" / f"global_step_{s}" / "summary.json").is_file())
        shown = ", ".join(map(str, have)) if have else "none"
        return EvalState(
            "partial",
            f"{where} evaluated checkpoints {shown} of the {len(wanted)} this sweep asks for; "
            "`repro sweep eval SWEEP` evaluates the rest",
            job=job,
            steps=have,
        )
    tail = _log_tail(job)
    detail = js.detail or js.state
    why = f"{where} ended {detail}" + (f": {tail}" if tail else "") + (f"; log {log}" if log else "")
    return EvalState("failed", why, job=job)


def _job_state(job: dict[str, Any]) -> JobState:
    launcher = job.get("launcher")
    if launcher == "local":
        code = job.get("exit_code")
        if code is None:
            return JobState("unknown", "the local evaluation did not record an exit (killed?)")
        return JobState("finished" if code == 0 else "failed", f"exit {code}")
    from repro.launch.state import scheduler_for

    owner = scheduler_for(job)
    if owner is None:
        return JobState("unknown", "no scheduler for this record")
    state = owner.state(job)
    if launcher == "slurm" and state.state == "queued":
        reason = _slurm_reason(str(job.get("job_id")))
        return JobState("queued", f"{state.detail} ({reason})" if reason else state.detail)
    if launcher == "slurm" and state.state == "cancelled":
        reason = _slurm_reason(str(job.get("job_id")))
        return JobState("cancelled", reason or state.detail)
    return state


def _slurm_reason(job_id: str) -> str:
    import re
    import subprocess

    try:
        out = subprocess.run(["scontrol", "show", "job", job_id, "-o"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    match = re.search(r"\bReason=(\S+)", out.stdout)
    return match.group(1) if match and match.group(1) != "None" else ""


# ---- Slurm ------------------------------------------------------------------------------------------


def render_eval_script(
    run_dir: Path,
    name: str,
    spec: EvalSpec,
    options: Any,
    *,
    gpus: int,
    sweep_name: str,
    project_dir: Path,
    python_bin: Path | None = None,
    home: Path | None = None,
) -> str:
    """The sbatch script of one cell's evaluation: one node, the cell's GPUs, one `repro eval` process
    that starts one shard per GPU (CUDA_VISIBLE_DEVICES from Slurm's allocation)."""
    from repro.launch.slurm import SLURM_DIR, _command_line, continuation_tail, job_environment, limit_lines
    from repro.paths import repro_home
    from repro.weights_cache import job_env

    python_bin = Path(python_bin or Path(sys.executable).parent)
    home = Path(home or repro_home()).absolute()
    cpus = options.cpus_per_task or (8 * gpus if gpus else 2)
    sbatch = [
        f"--job-name=repro-eval-{name}",
        f"--output={run_dir / SLURM_DIR}/eval-%j.out",
        "--nodes=1",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus}",
        f"--time={spec.time}",
        "--requeue",  # the time limit requeues it (the evaluation resumes from its records)
        "--open-mode=append",  # every allocation appends to the same eval-<job id>.out
    ]
    if gpus:
        sbatch.append(f"--gpus-per-node={gpus}")
    for flag in ("account", "partition", "mem"):
        if getattr(options, flag):
            sbatch.append(f"--{flag}={getattr(options, flag)}")
    sbatch += list(options.extra)
    lines = [
        "#!/usr/bin/env bash",
        f"# repro evaluation of cell {name} (sweep {sweep_name}), written by `repro sweep run|eval --launcher slurm`.",
        "# Submitted with --dependency=afterok:<the training job>: it starts once training has succeeded.",
        f"# An interrupted evaluation resumes from its records: resubmit with sbatch {run_dir / SLURM_DIR}/eval.sbatch",
        *(f"#SBATCH {opt}" for opt in sbatch),
        *job_environment(project_dir, python_bin, home, hub_env=job_env() if gpus else None),
    ]
    if not gpus:
        lines.append('export OMP_NUM_THREADS="$SLURM_CPUS_PER_TASK"')
    lines += [
        "# --- the time limit ---------------------------------------------------------------------------",
        "# Slurm's TERM for the time limit (Reason=TimeLimit) requeues this job before the kill: the next",
        "# allocation's `repro eval` skips what is recorded and goes on. Any other TERM (scancel) ends it.",
        *limit_lines(run_dir, options.max_allocations, "eval"),
        'echo "repro: evaluation allocation $allocation of at most $max_allocations (job $SLURM_JOB_ID)"',
        _command_line(eval_argv(run_dir, spec)) + " &",
        *continuation_tail("eval"),
        "",
    ]
    return "\n".join(lines)


def submit_slurm_eval(plan: Any, spec: EvalSpec, scheduler: Any, sweep_name: str, after: str | None) -> dict[str, Any]:
    from repro.launch.slurm import SLURM_DIR, _run

    gpus = (scheduler.options.gpus_per_node or plan.gpu.gpus_per_node) if plan.gpu else 0
    text = render_eval_script(
        plan.run_dir,
        plan.name,
        spec,
        scheduler.options,
        gpus=gpus,
        sweep_name=sweep_name,
        project_dir=scheduler.project_dir,
        python_bin=scheduler.python_bin,
    )
    path = plan.run_dir / SLURM_DIR / "eval.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text)
    path.chmod(0o755)
    argv = ["sbatch", "--parsable"]
    if after:
        argv += [f"--dependency=afterok:{after}", "--kill-on-invalid-dep=yes"]
    result = _run([*argv, str(path)])
    if result.returncode != 0:
        raise ReproError(f"sbatch refused {path}: {(result.stderr or result.stdout).strip()[:300]}")
    job_id = result.stdout.strip().split(";")[0]
    log = plan.run_dir / SLURM_DIR / f"eval-{job_id}.out"
    return {
        "launcher": "slurm",
        "job_id": job_id,
        "submitted": now(),
        "sweep": sweep_name,
        "script": str(path),
        "after": after,
        "log": str(log),
    }


# ---- Ray --------------------------------------------------------------------------------------------


def write_request(run_dir: Path, spec: EvalSpec, scheduler: Any, sweep_name: str, gpus: int) -> None:
    """What the training job needs to submit its own evaluation once it has succeeded."""
    request = {
        "spec": spec.to_dict(),
        "sweep": sweep_name,
        "address": scheduler.address,
        "python": scheduler.python,
        "gpus": gpus,
        "cpus": scheduler.cpu_cell_cpus,
        "home": str(Path(scheduler.home).absolute()) if scheduler.home else None,
    }
    if gpus:  # the submitting machine's cache: the training job that submits the evaluation has no HF_HOME
        from repro.weights_cache import job_env

        request["hub_env"] = job_env()
    write_text(run_dir / EVAL_REQUEST, json.dumps(request, indent=2) + "\n")


def ray_chain(run_dir: Path, python: str) -> str:
    """The shell words the training job's entrypoint runs after training succeeds."""
    return " ".join(shlex.quote(a) for a in [python, "-m", "repro.launch.eval_stage", "ray-submit", str(run_dir)])


def submit_ray_eval(
    run_dir: Path,
    name: str,
    spec: EvalSpec,
    *,
    address: str,
    python: str,
    gpus: int,
    cpus: int,
    sweep_name: str,
    project_dir: Path,
    home: Path | None = None,
    hub_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    import re

    from repro.launch.ray_jobs import RayScheduler, _client
    from repro.weights_cache import job_env

    n = len(job_records(run_dir, file=EVAL_JOBS)) + 1
    job_id = re.sub(r"[^A-Za-z0-9_.-]", "-", f"repro-eval-{name}-{n}-{now()}")
    entrypoint = " ".join(shlex.quote(a) for a in eval_argv(run_dir, spec, python))
    scheduler = RayScheduler(address=address, project_dir=project_dir, python=python, home=home)
    offline = (hub_env or job_env()) if gpus else None  # a GPU cell's evaluation reads the cache offline
    runtime_env = scheduler.runtime_env(job_id, threads=None if gpus else cpus, hub_env=offline)
    try:
        _client(address).submit_job(
            entrypoint=entrypoint,
            submission_id=job_id,
            runtime_env=runtime_env,
            entrypoint_num_cpus=None if gpus else cpus,
            entrypoint_num_gpus=gpus or None,
        )
    except ReproError:
        raise
    except Exception as exc:
        raise ReproError(f"Ray refused the evaluation of {name}: {' '.join(str(exc).split())[:300]}") from None
    return {
        "launcher": "ray",
        "job_id": job_id,
        "submitted": now(),
        "sweep": sweep_name,
        "address": address,
        "entrypoint": entrypoint,
    }


def ray_submit_from_request(run_dir: Path) -> int:
    """Run inside a Ray training job after training succeeded: submit the cell's evaluation job."""
    try:
        request = json.loads((run_dir / EVAL_REQUEST).read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {run_dir / EVAL_REQUEST} is unreadable ({exc}); `repro sweep eval` submits it", file=sys.stderr)
        return 2
    spec = EvalSpec(**request["spec"])
    if eval_done(run_dir, spec)[0]:
        print(f"{run_dir.name}: evaluation already complete")
        return 0
    record = submit_ray_eval(
        run_dir,
        run_dir.name,
        spec,
        address=request["address"],
        python=request["python"],
        gpus=int(request.get("gpus") or 0),
        cpus=int(request.get("cpus") or 1),
        sweep_name=request.get("sweep") or "",
        project_dir=Path.cwd(),
        home=Path(request["home"]) if request.get("home") else None,
        hub_env=request.get("hub_env"),
    )
    record_eval_job(run_dir, record)
    print(f"{run_dir.name}: evaluation submitted as ray job {record['job_id']}")
    return 0


# ---- local ------------------------------------------------------------------------------------------


def run_local_eval(
    run_dir: Path, spec: EvalSpec, log_dir: Path, python: str, threads: int, workers: Any = None
) -> tuple[int, str]:
    """`repro eval` of one finished cell here, forked from `workers` (repro.launch.warm.WarmWorkers) when given,
    else started cold; returns (exit code, the last line of its stderr)."""
    import socket
    import subprocess

    name = run_dir.name
    log_dir.mkdir(parents=True, exist_ok=True)
    out_path, err_path = log_dir / f"{name}.eval.out", log_dir / f"{name}.eval.err"
    env = {**os.environ, "REPRO_LAUNCHER": "local", "OMP_NUM_THREADS": str(threads)}
    env["REPRO_TORCH_THREADS"] = str(threads)
    argv = eval_argv(run_dir, spec, python)
    base = {"launcher": "local", "host": socket.gethostname(), "argv": argv, "log": str(err_path)}
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        if workers is not None:
            proc = workers.popen(argv, stdout=out, stderr=err, env=env)
        else:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        record_eval_job(run_dir, {**base, "job_id": f"pid-{proc.pid}", "submitted": now(), "exit_code": None})
        code = proc.wait()
        if code is None:  # its warm worker died before it ended: the records say whether it is done
            code = 0 if eval_done(run_dir, spec)[0] else 1
    record_eval_job(
        run_dir, {**base, "job_id": f"pid-{proc.pid}", "submitted": now(), "ended": now(), "exit_code": code}
    )
    tail = _log_tail({"log": str(err_path)})
    return code, tail


def main(args: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if args is None else args)
    if len(args) != 2 or args[0] != "ray-submit":
        print("usage: python -m repro.launch.eval_stage ray-submit RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[1])
    try:
        RunDir(run_dir)
        return ray_submit_from_request(run_dir)
    except ReproError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
