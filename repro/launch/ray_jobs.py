"""The Ray launcher: each cell is one job on an existing Ray cluster, submitted through the Jobs API.

The runtime environment uploads this project (working_dir, minus virtual environments, runs and results)
so the cluster runs exactly the submitter's code, and sets REPRO_LAUNCHER / REPRO_JOB_ID so the run
folder's attempts name their job. The submission id is chosen here (``repro-<cell>-<n>``), so it is on
disk in jobs.jsonl before the cluster could start anything.

Ray's Jobs API has no time limit of its own. With one (`limit`: `--time` with `--launcher ray`) the cell runs
under `repro.launch.deadline`, which ends the job as Slurm ends an allocation (the stop request `margin`
seconds before, SIGTERM at the limit) and exits STOPPED_EXIT; `stopped_for_continuation` tells the waiting
submitter (`repro.sweep_submit`) such a job from a failed one, and it submits the next job of the chain.
Without a limit the entrypoint is the cell's command alone, as before.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.errors import ReproError
from repro.launch.allocations import STOPPED_EXIT
from repro.launch.attempt import THREADS_ENV
from repro.launch.deadline import TimeLimit
from repro.launch.jobs import JobState, job_records, now
from repro.launch.plan import CellPlan
from repro.paths import repro_home

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
# Never uploaded: environments, caches, outputs (working_dir uses .gitignore-style patterns).
EXCLUDES = [".venv/", ".git/", "runs/", "results/", "**/__pycache__/", "*.egg-info/", ".ruff_cache/", ".pytest_cache/"]
# The Jobs API answers "No available agent to submit job, please try again later." while no node's job agent
# is up (a cluster started moments ago, or one too busy to answer in time); nothing was submitted then, so
# the same submission id is sent again after these waits (seconds).
TRY_LATER = "please try again later"
SUBMIT_RETRY_S = (2.0, 5.0, 10.0, 20.0)
_STATES = {
    "PENDING": "queued",
    "RUNNING": "running",
    "SUCCEEDED": "finished",
    "FAILED": "failed",
    "STOPPED": "cancelled",
}


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # ray raises ConnectionError, RuntimeError or ValueError here
        raise ReproError(
            f"cannot reach the Ray Jobs API at {address} ({' '.join(str(exc).split())[:200]}); "
            "pass --ray-address http://HEAD:8265 (the dashboard port)"
        ) from None


@dataclass
class RayScheduler:
    address: str = DEFAULT_ADDRESS
    project_dir: Path = field(default_factory=Path.cwd)
    python: str = "python"  # the interpreter on the cluster's nodes
    home: Path | None = None  # $REPRO_HOME on the cluster (default: this machine's)
    cpu_cell_cpus: int = 1  # CPU cells: CPUs reserved for the job's entrypoint, and its torch threads
    limit: TimeLimit | None = None  # a time limit per job (repro.launch.deadline); None: a job runs to its end
    name: str = "ray"

    @property
    def max_allocations(self) -> int:
        """Jobs one submission may take in all, the first and its continuations (1 without a limit)."""
        return self.limit.max_allocations if self.limit is not None else 1

    def margin(self, plan: CellPlan) -> int:
        """Seconds before the limit at which the cell is asked to stop: the Slurm launcher's for the same cell
        and limit (`--signal-margin`, else a GPU cell's step plus its save, 60 s for a CPU cell, at most half)."""
        assert self.limit is not None
        from repro.launch.slurm import SlurmOptions, signal_margin

        return signal_margin(plan, SlurmOptions(time=self.limit.time, signal_margin=self.limit.signal_margin))

    def cell_argv(self, plan: CellPlan, allocation: int = 1) -> list[str]:
        """The cell's command on the cluster: under the deadline wrapper when there is a limit."""
        argv = [self.python, *plan.argv[1:]]
        if self.limit is None:
            return argv
        wrapper = [self.python, "-m", "repro.launch.deadline", str(plan.run_dir), "--time", str(self.limit.seconds)]
        wrapper += ["--margin", str(self.margin(plan)), "--allocation", str(allocation)]
        return [*wrapper, "--max-allocations", str(self.limit.max_allocations), "--", *argv]

    def check(self) -> None:
        _client(self.address)  # connects: a wrong address fails here, once

    def runtime_env(
        self, job_id: str, threads: int | None = None, hub_env: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """The job's runtime env; `hub_env` (repro.weights_cache.job_env) for a GPU cell's evaluation job. A GPU
        training job gets those variables through verl's own `ray_init.runtime_env` (the cell's overrides)
        instead: Ray refuses a driver's runtime env that names a variable the job's already sets
        (ray/_private/worker.py, `_merge_runtime_env`), so they must not be in both."""
        env = {
            "working_dir": str(self.project_dir),
            "excludes": EXCLUDES,
            "env_vars": {
                "REPRO_LAUNCHER": "ray",
                "REPRO_JOB_ID": job_id,
                "REPRO_HOME": str(Path(self.home or repro_home()).absolute()),
                "PYTHONUNBUFFERED": "1",
            },
        }
        if threads is not None:
            env["env_vars"][THREADS_ENV] = str(threads)
        env["env_vars"].update(hub_env or {})
        return env

    def submit(self, plan: CellPlan, sweep_name: str, then: str | None = None, allocation: int = 1) -> dict[str, Any]:
        """Submit the cell; `then` is a shell command the job runs after training succeeds (the sweep's
        evaluation stage submits the cell's evaluation job this way: repro.launch.eval_stage). `allocation`:
        the job's place in its chain of continuations under a time limit (1: a new submission)."""
        import shlex

        n = len(job_records(plan.run_dir)) + 1
        job_id = re.sub(r"[^A-Za-z0-9_.-]", "-", f"repro-{plan.name}-{n}-{now()}")
        entrypoint = " ".join(shlex.quote(a) for a in self.cell_argv(plan, allocation))
        if plan.is_gpu:  # the driver's host: the stack, the attention, the disk (its GPUs are the workers')
            check = [self.python, *plan.gpu.node_check[1:]]
            check.append("--submission")
            entrypoint = f"{' '.join(shlex.quote(a) for a in check)} && {entrypoint}"
        if then:
            entrypoint = f"{entrypoint} && {then}"
        # a CPU cell reserves its CPUs, so Ray queues cells rather than oversubscribing the cores;
        # a GPU cell's entrypoint is only verl's driver, whose workers ask Ray for the GPUs themselves
        cpus = None if plan.is_gpu else self.cpu_cell_cpus
        for wait in (*SUBMIT_RETRY_S, None):
            try:
                _client(self.address).submit_job(
                    entrypoint=entrypoint,
                    submission_id=job_id,
                    runtime_env=self.runtime_env(job_id, threads=cpus),
                    entrypoint_num_cpus=cpus,
                )
                break
            except ReproError:
                raise
            except Exception as exc:
                message = " ".join(str(exc).split())
                if wait is None or TRY_LATER not in message:
                    raise ReproError(f"Ray refused the job for {plan.name}: {message[:300]}") from None
                time.sleep(wait)  # a head whose node agent is not up yet (a fresh or busy cluster)
        record = {
            "launcher": "ray",
            "job_id": job_id,
            "submitted": now(),
            "sweep": sweep_name,
            "address": self.address,
            "entrypoint": entrypoint,
            "entrypoint_num_cpus": cpus,
        }
        if self.limit is not None:
            record.update(time_limit_s=self.limit.seconds, allocation=allocation)
            record.update(max_allocations=self.limit.max_allocations, signal_margin=self.margin(plan))
        return record

    def state(self, record: dict[str, Any]) -> JobState:
        try:
            client = _client(record.get("address") or self.address)
            status = client.get_job_status(record["job_id"])
        except ReproError as exc:
            return JobState("unknown", str(exc))
        except Exception as exc:  # an unknown id (a restarted cluster) raises
            return JobState("unknown", " ".join(str(exc).split())[:200])
        word = str(getattr(status, "value", status))
        return JobState(_STATES.get(word, "unknown"), word)

    def stopped_for_continuation(self, record: dict[str, Any]) -> bool:
        """Whether the job ended so that its cell goes on in a new job: stopped on request at its time limit's
        warning, or ended by the limit itself (`repro.launch.deadline` then exits STOPPED_EXIT, which the
        entrypoint's shell passes on). A failed job, or one Ray stopped (`repro cancel`), is not continued."""
        try:
            info = _client(record.get("address") or self.address).get_job_info(record["job_id"])
        except Exception:  # unreachable, or a cluster that forgot the job: not a continuation
            return False
        status = str(getattr(info.status, "value", info.status))
        return status == "FAILED" and getattr(info, "driver_exit_code", None) == STOPPED_EXIT

    def cancel(self, record: dict[str, Any]) -> None:
        client = _client(record.get("address") or self.address)
        try:
            client.stop_job(record["job_id"])
        except Exception as exc:
            raise ReproError(f"Ray could not stop {record['job_id']}: {' '.join(str(exc).split())[:200]}") from None

    def logs(self, record: dict[str, Any]) -> str:
        try:
            return _client(record.get("address") or self.address).get_job_logs(record["job_id"])
        except Exception:
            return ""
