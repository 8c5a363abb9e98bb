"""One attempt of a verl run: lock the run folder, number the attempt, run the trainer, record how it ended.

`repro run` (GPU backbones) and the generated Slurm / Ray job scripts all start verl through this, so the
trainer command a job script shows is exactly the config builder's, with ``attempt-NNN.jsonl`` standing
for the metrics file that only exists once the attempt is numbered::

    python -m repro.launch.attempt RUN_DIR -- python -m repro.verl_plugin.entry <overrides>

Which launcher started the attempt, and its job id, come from the environment (``REPRO_LAUNCHER``,
``REPRO_JOB_ID``), which every launcher sets, so status.json says where each attempt ran.

When the job's allocation is ending, its script asks the trainer to stop (`repro.launch.allocations`);
verl's trainer (`repro.verl_plugin.stop_trainer`) saves the step it is on, ends its loop and leaves a
record that it did, and this process then ends the attempt as interrupted and exits with STOPPED_EXIT,
on which the job script requeues the job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from repro import arithmetic
from repro.errors import ReproError
from repro.launch.allocations import (
    ALLOCATION_ENV,
    STOPPED_EXIT,
    clear_stale_request,
    discard_request,
    stop_reason,
    stop_request,
    take_honoured,
)
from repro.launch.attention import attention_fallback
from repro.rundir import RunDir
from repro.rundir.pause import pause_at
from repro.rundir.retention import kept_from_overrides, retain

PLACEHOLDER = "attempt-NNN.jsonl"
LAUNCHER_ENV = "REPRO_LAUNCHER"
JOB_ID_ENV = "REPRO_JOB_ID"
THREADS_ENV = "REPRO_TORCH_THREADS"  # CPU cells: torch threads, when a launcher runs several cells at once


def launcher_from_env() -> tuple[str, str | None]:
    """(launcher, job id) for an attempt record: what the launcher exported, else a plain local run."""
    return os.environ.get(LAUNCHER_ENV) or "local", os.environ.get(JOB_ID_ENV) or None


def allocation_from_env() -> dict[str, int]:
    """{"allocation": n} for an attempt record when a job script says which allocation this is: `repro status`
    pairs it with the script's record of how that allocation ended (slurm/allocations.jsonl)."""
    raw = os.environ.get(ALLOCATION_ENV, "")
    return {"allocation": int(raw)} if raw.isdigit() else {}


def _cpu_cell(argv: Sequence[str]) -> bool:
    return "trainer.device=cpu" in argv  # what every CPU rehearsal's overrides set (catalog/cpu_resources.yaml)


def _trainer_env(argv: Sequence[str]) -> dict[str, str]:
    """verl's trainer gets the user's own environment back (repro.arithmetic pins the project's own CPU
    computations): on a GPU cell the pin's one thread and AVX2 kernels would slow a cluster job, and on a CPU
    rehearsal vLLM's own kernels choose their ISA from the hardware whatever the variables say, so the
    rehearsal's rollouts could not be pinned anyway; none of its numbers are committed results."""
    return arithmetic.released(dict(os.environ))


def run_attempt(rundir: RunDir, argv: Sequence[str]) -> int:
    """Run `argv` as the next attempt of `rundir` and return its exit code.

    SIGTERM (what `scancel` and Ray's stop_job send) is passed on to the trainer, and the attempt is then
    recorded as interrupted, so the next launch resumes from the last checkpoint.
    """
    launcher, job_id = launcher_from_env()
    # a CPU rehearsal's attempt records the CPU it ran on, unpinned (see _trainer_env)
    extra = {"arithmetic": {"pinned": False, "cpu": arithmetic.cpu_model()}} if _cpu_cell(argv) else {}
    stopped: list[int] = []
    proc: subprocess.Popen | None = None

    def forward(signum: int, _frame: object) -> None:
        stopped.append(signum)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signum)

    metrics_path = rundir.begin_attempt(launcher=launcher, job_id=job_id, extra={**extra, **allocation_from_env()})
    # from here on a TERM is recorded, whenever it comes: slimming old saves can take minutes on a big model
    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        clear_stale_request(rundir.path, job_id)
        take_honoured(rundir.path)  # a record no attempt collected (that attempt was killed) says nothing of this one
        latest = rundir.latest_checkpoint()  # what verl's resume_mode=auto loads: the tracker file's step
        final = [part.replace(PLACEHOLDER, metrics_path.name) for part in argv]
        # the saves earlier allocations left: all but the newest K slimmed before the trainer starts
        when = f"at the start of attempt {int(metrics_path.stem.removeprefix('attempt-'))}"
        for line in retain(rundir.checkpoints_dir, kept_from_overrides(final), when):
            print(line, flush=True)
        final, attention = attention_fallback(final)  # no flash-attn on this node: sdpa, said, not a failed cell
        if attention is not None:
            used, asked = attention["used"], attention["asked"]
            print(f"repro: attention {used} instead of {asked}: {attention['why']}", file=sys.stderr)
        fields = {"attention": attention} if attention else {}
        rundir.set_attempt(command=final, resumed_from_step=latest[0] if latest else None, **fields)
        pause_at(rundir.path, "start", go_on=lambda: bool(stopped))  # a rehearsal's moment: the attempt starting
        if stopped:  # the job ended while this attempt was starting: no trainer to start
            rundir.end_attempt("interrupted", f"stopped by signal {stopped[0]} while starting", moment="starting")
            return 128 + stopped[0]
        if stop_request(rundir.path) is not None:  # warned while starting: the trainer would not reach a step
            discard_request(rundir.path)
            step = latest[0] if latest else 0
            rundir.end_attempt("interrupted", stop_reason(step), moment="starting")
            return STOPPED_EXIT
        proc = subprocess.Popen(final, env=_trainer_env(final))
        if stopped:  # the signal came between the check above and the trainer's start
            proc.send_signal(stopped[0])
        code = proc.wait()
    except BaseException as exc:
        rundir.end_attempt("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    honoured = take_honoured(rundir.path)
    pending = stop_request(rundir.path)  # asked for, but the trainer ended before a step boundary
    discard_request(rundir.path)
    if honoured is not None:  # the step is saved whatever the trainer's teardown did after it
        after = f" (the trainer then exited with {code})" if code else ""
        step = int(honoured.get("step", 0))
        rundir.end_attempt("interrupted", stop_reason(step) + after, moment=f"after step {step}")
        return STOPPED_EXIT
    if stopped:
        rundir.end_attempt("interrupted", f"stopped by signal {stopped[0]}" + _lost(rundir, pending), moment="training")
    elif code == 0:
        rundir.end_attempt("finished")
    else:
        why = f"{Path(final[0]).name} {' '.join(final[1:3])} exited with {code}"
        rundir.end_attempt("failed", why + _lost(rundir, pending))
    return code


def _lost(rundir: RunDir, pending: dict | None) -> str:
    """What an attempt that was asked to stop, and did not get to a step boundary first, loses."""
    if pending is None:
        return ""
    latest = rundir.latest_checkpoint()
    where = f"the checkpoint at step {latest[0]}" if latest else "the start"
    return f" after the allocation's end warning, before a step boundary: the steps since {where} are lost"


def main(args: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if args is None else args)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m repro.launch.attempt RUN_DIR -- COMMAND...", file=sys.stderr)
        return 2
    try:
        return run_attempt(RunDir(args[0]), args[2:])
    except ReproError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
