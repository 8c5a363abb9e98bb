"""The Slurm launcher: one readable `sbatch` script per cell, kept in the run folder for resubmission.

GPU cells run `python -m repro.launch.attempt RUN -- <the config builder's trainer command>`; a cell on
more than one node first starts a Ray cluster across the allocation (head on the first node, one worker
per other node, each `ray start --block` inside its own `srun` step), waits until every GPU has joined,
and points verl at it through RAY_ADDRESS. CPU cells run `python -m repro.cli run ...`.

A cell longer than the partition's time limit spans allocations by itself (`continuation_lines`): Slurm
warns the script before --time runs out, the trainer stops at a step boundary with that step saved, and
the script requeues the same job id (so an `afterok` dependency waits for the last allocation), at most
`max_allocations` allocations in all.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.atomic import write_text
from repro.errors import ReproError
from repro.launch.allocations import ENDS_FILE, STOP_REQUEST, STOPPED_EXIT
from repro.launch.jobs import JobState, now
from repro.launch.plan import CellPlan
from repro.launch.slurm_options import SlurmOptions, time_seconds
from repro.paths import repro_home
from repro.weights_cache import job_env

SCRIPT_NAME = "job.sbatch"
SLURM_DIR = "slurm"  # inside the run folder: the script and the jobs' output files
RAY_PORT = 6379

_QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
_RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING", "STOPPED"}


def _q(value: str | os.PathLike[str]) -> str:
    return shlex.quote(str(value))


def _command_line(argv: list[str]) -> str:
    """One word per line after the module name, so a 70-override verl command stays readable."""
    head = max((i + 2 for i, a in enumerate(argv) if a == "-m"), default=len(argv))
    words = [" ".join(_q(a) for a in argv[:head]), *(_q(a) for a in argv[head:])]
    return " \\\n    ".join(words)


def ray_bootstrap(nnodes: int, gpus_per_node: int) -> list[str]:
    """Bash lines that start Ray on every node of the allocation and wait for all of its GPUs."""
    total = nnodes * gpus_per_node
    return [
        f"# multi-node: a Ray cluster across the {nnodes} nodes of this allocation, then verl on the head node",
        'mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'head_node="${nodes[0]}"',
        'head_ip="$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk \'{print $1}\')"',
        f'ray_address="$head_ip:{RAY_PORT}"',
        'srun --nodes=1 --ntasks=1 --overlap -w "$head_node" ray start --head --node-ip-address="$head_ip" '
        f'--port={RAY_PORT} --num-cpus="$SLURM_CPUS_PER_TASK" --num-gpus={gpus_per_node} --block &',
        "sleep 10",
        'for node in "${nodes[@]:1}"; do',
        '  srun --nodes=1 --ntasks=1 --overlap -w "$node" ray start --address="$ray_address" '
        f'--num-cpus="$SLURM_CPUS_PER_TASK" --num-gpus={gpus_per_node} --block &',
        "done",
        f'python -m repro.launch.wait_ray --address "$ray_address" --resource GPU --count {total} --timeout 900',
        'export RAY_ADDRESS="$ray_address"',
    ]


GPU_SIGNAL_MARGIN = 900  # a GPU plan without a catalog cell (its backbone's own margin is allocation_end's)
CPU_SIGNAL_MARGIN = 60  # a tiny-arith step and its save take about a second


def signal_margin(plan: CellPlan, options: SlurmOptions) -> int:
    """Seconds before --time at which Slurm warns the script: the option, else the cell's own (a GPU cell's
    slowest step plus its save, per backbone: repro.launch.allocation_end), kept under half the time limit so
    a short test allocation still trains before it is warned."""
    if options.signal_margin is not None:
        return options.signal_margin
    if plan.gpu is not None and plan.cell is not None:
        from repro.launch.allocation_end import from_overrides

        default = from_overrides(plan.cell.backbone.key, plan.gpu.overrides).margin_s
    else:
        default = GPU_SIGNAL_MARGIN if plan.gpu else CPU_SIGNAL_MARGIN
    return max(1, min(default, time_seconds(options.time) // 2))


def limit_lines(run_dir: Path, max_allocations: int, stage: str) -> list[str]:
    """Bash lines shared by the training and the evaluation scripts: the allocation count, the record of how
    each allocation ended (slurm/allocations.jsonl, read by `repro status`), and the TERM trap that tells
    Slurm's time limit from a cancel and requeues the job before the kill."""
    return [
        f"max_allocations={max_allocations}",
        "allocation=$(( ${SLURM_RESTART_COUNT:-0} + 1 ))",
        'export REPRO_ALLOCATION="$allocation"  # each attempt records which allocation it ran in',
        f"ends_file={_q(run_dir / ENDS_FILE)}",
        'warned=""  # set by USR1: this allocation is ending',
        'terminated=""  # set by TERM: the time limit, a cancel, or preemption',
        'requeued=""  # this allocation has asked Slurm for the next one',
        'ended=""  # this allocation\'s end is recorded',
        "record_end() {  # $1: what ended this allocation, $2: whether the job was requeued",
        '  [[ -n "$ended" ]] && return 0',
        "  ended=1",
        f'  printf \'{{"stage": "{stage}", "job_id": "%s", "allocation": %d, "end": "%s", "requeued": %s, '
        '"at": "%s"}\\n\' "$SLURM_JOB_ID" "$allocation" "$1" "$2" "$(date -u +%FT%T+00:00)" >> "$ends_file" || true',
        "}",
        "requeued_already() {  # whether slurmctld counts a requeue of this allocation (Restarts=allocation)",
        "  local restarts",
        '  restarts="$( (trap "" TERM; exec scontrol show job "$SLURM_JOB_ID" -o) 2>/dev/null \\',
        "    | grep -o -E 'Restarts=[0-9]+' | cut -d= -f2 || true)\"",
        '  [[ -n "$restarts" ]] && (( restarts >= allocation ))',
        "}",
        "requeue() {  # $1: why; asks Slurm for the next allocation of this same job id, once",
        '  [[ -n "$requeued" ]] && return 0',
        "  if (( allocation >= max_allocations )); then",
        '    echo "repro: allocation $allocation was the last of $max_allocations; not requeued'
        ' (repro sweep retry-failed submits it again)"',
        '    record_end "$1" false',
        "    return 1",
        "  fi",
        "  requeued=1",
        '  echo "repro: requeueing job $SLURM_JOB_ID for allocation $(( allocation + 1 )) of $max_allocations ($1)"',
        "  # a requeue ends this allocation at once: Slurm's TERM reaches every process of the job, scontrol too,",
        "  # maybe before it returns, so scontrol ignores TERM; a failure is checked against slurmctld's count",
        '  if ( trap "" TERM; exec scontrol requeue "$SLURM_JOB_ID" ) || requeued_already; then',
        '    record_end "$1" true',
        "    return 0",
        "  fi",
        '  echo "repro: scontrol requeue failed"',
        '  record_end "$1" false',
        "  return 1",
        "}",
        "job_state() {  # what slurmctld says of this job now: 'JobState=... Reason=...', or nothing",
        '  (trap "" TERM; exec timeout 10 scontrol show job "$SLURM_JOB_ID" -o) 2>/dev/null \\',
        "    | grep -o -E 'JobState=[A-Z_]+|Reason=[A-Za-z_]+' | tr '\\n' ' ' || true",
        "}",
        "on_term() {",
        "  terminated=1 signalled=1",
        "  # Slurm sends TERM to every process of the job for its time limit, a cancel, preemption and a requeue;",
        "  # only the first ends a run that should go on, and only slurmctld knows which it was (Reason=TimeLimit)",
        '  local why=""',
        '  [[ -n "$requeued" ]] || why="$(job_state)"',
        '  if [[ -z "$requeued" && ( "$why" == *Reason=TimeLimit* || "$why" == *JobState=TIMEOUT* ||',
        '        ( -z "$why" && -n "$warned" ) ) ]]; then',
        '    echo "repro: TERM at $(date -u +%T): the time limit (${why:-warned before; slurmctld did not answer})"',
        '    requeue "time limit" || true  # now, before the kill: what KillWait leaves time for',
        "  else",
        '    echo "repro: TERM at $(date -u +%T): the job is ending (${why:-cancel, preemption or requeue})"',
        "  fi",
        "}",
        "trap on_term TERM",
    ]


def continuation_lines(run_dir: Path, max_allocations: int, margin: int) -> list[str]:
    """Bash lines that make a job span allocations: the USR1 / TERM traps and the comment that explains them."""
    return [
        "# --- spanning allocations ---------------------------------------------------------------------",
        f"# {margin} s before --time runs out Slurm sends USR1 to this script (--signal=B:USR1@{margin}; Slurm's",
        "# timer ticks every 30 s, so it may come up to a minute early). The trap asks the trainer to stop: it",
        "# writes the stop request, the trainer finishes the step in flight, saves it and exits with code 75, and",
        "# this script requeues the job (same job id, so an afterok dependency waits for the last allocation);",
        f"# the next allocation resumes from that checkpoint. At most {max_allocations} allocations in all; after the",
        "# last one the run stays interrupted (`repro sweep retry-failed` submits it again).",
        "# If the time limit comes first (a slow step or save, a warning during start-up), Slurm's TERM is",
        "# recognised as the time limit (slurmctld's Reason=TimeLimit) and the job is requeued at once, before",
        "# the kill: the trainer stops where it is and the next allocation resumes from the last checkpoint.",
        "# Any other TERM is scancel, or preemption: the trainer stops at once (its last checkpoint stands) and",
        "# this script does not requeue. A preempted job on a partition with PreemptMode=REQUEUE is requeued by",
        "# Slurm itself (--requeue), and resumes. Each allocation's end is a line of slurm/allocations.jsonl.",
        f"stop_file={_q(run_dir / STOP_REQUEST)}",
        f"margin={margin}",
        *limit_lines(run_dir, max_allocations, "train"),
        'rm -f "$stop_file"  # a request of an earlier allocation is stale',
        "request_stop() {  # written whole, then renamed: the trainer sees all of the request or none",
        "  warned=1 signalled=1",
        '  cat > "$stop_file.tmp" <<JSON && mv -f "$stop_file.tmp" "$stop_file" || echo "repro: cannot write it"',
        '{"reason": "allocation $allocation of slurm job $SLURM_JOB_ID ends in about $margin s", '
        '"job_id": "$SLURM_JOB_ID", "allocation": $allocation, "requested": "$(date -u +%FT%T+00:00)"}',
        "JSON",
        '  echo "repro: USR1 at $(date -u +%T): asked the trainer to stop after its step"',
        "}",
        "trap request_stop USR1",
        'echo "repro: allocation $allocation of at most $max_allocations (job $SLURM_JOB_ID on $(hostname))"',
        *finished_lines(run_dir),
    ]


def finished_lines(run_dir: Path) -> list[str]:
    """Bash lines that end an allocation of a finished run at once, with success: the time limit can land after
    the run's last step was recorded, and the job is then requeued so that it ends COMPLETED (an afterok
    evaluation job waits for that) rather than TIMEOUT."""
    status = _q(run_dir / "status.json")
    check = "import json, sys; sys.exit(json.load(open(sys.argv[1])).get('state') != 'finished')"
    return [
        f'if [[ -f {status} ]] && python -c "{check}" {status} 2>/dev/null; then',
        '  echo "repro: the run is finished already; nothing to do in this allocation"',
        "  record_end finished false",
        "  exit 0",
        "fi",
    ]


def continuation_tail(stage: str = "train") -> list[str]:
    """Bash lines after the command (run with `&`): wait for it, then requeue, or exit with its code."""
    lines = [
        "cell=$!",
        "# `wait` returns early when a trapped signal arrives (the traps set `signalled`): then wait again. If",
        "# the cell ended at that moment, that `wait` already returned its code and the next one finds no job.",
        'code=""',
        "while :; do",
        '  signalled=""',
        "  status=0",
        '  wait "$cell" || status=$?',
        '  if [[ -n "$code" ]] && (( status == 127 || status < 0 )); then break; fi',
        "  code=$status",
        '  [[ -n "$signalled" ]] || break  # the cell has exited with $code',
        "done",
        f'if (( code != 0 && code != {STOPPED_EXIT} )) && [[ -z "$requeued" ]]; then',
        "  # the cell was ended, and bash can lose the TERM that lands with the warning (seen on Slurm 22.05:",
        "  # the USR1 trap ran, the TERM trap never did): slurmctld still says whether it was the time limit",
        '  why="$(job_state)"',
        '  if [[ "$why" == *Reason=TimeLimit* || "$why" == *JobState=TIMEOUT* ]]; then',
        '    echo "repro: the cell ended with $code at the time limit ($why)"',
        "    terminated=1",
        '    requeue "time limit" || true',
        "  fi",
        "fi",
        'if [[ -n "$requeued" ]]; then exit 0; fi  # the time limit: the next allocation goes on from here',
    ]
    if stage == "train":
        lines += [
            "# a warning that came as the cell was finishing (or failing) asked for nothing it could still do",
            f'(( code == {STOPPED_EXIT} )) || rm -f "$stop_file"',
            f'if [[ $code -eq {STOPPED_EXIT} && -n "$warned" && -z "$terminated" ]]; then',
            "  # stopped after a saved step because this allocation is ending, and the run is not finished",
            '  if requeue "warning"; then exit 0; fi',
            "fi",
        ]
    lines += [
        "if (( code == 0 )); then record_end finished false",
        'elif [[ -n "$terminated" ]]; then record_end cancelled false',
        "else record_end failed false; fi",
        'exit "$code"',
    ]
    return lines


def render_script(
    plan: CellPlan,
    options: SlurmOptions,
    *,
    sweep_name: str,
    project_dir: str | os.PathLike[str],
    python_bin: str | os.PathLike[str] | None = None,
    home: str | os.PathLike[str] | None = None,
) -> str:
    """The sbatch script of one cell. `python_bin` is the folder whose `python` the job uses (the
    project's virtual environment on the shared filesystem); `home` is $REPRO_HOME for the job."""
    options.check()
    python_bin = Path(python_bin or Path(sys.executable).parent)
    home = Path(home or repro_home()).absolute()
    out_dir = plan.run_dir / SLURM_DIR
    nnodes = plan.gpu.nnodes if plan.gpu else 1
    gpus = (options.gpus_per_node or plan.gpu.gpus_per_node) if plan.gpu else 0
    cpus = options.cpus_per_task or (8 * gpus if gpus else 2)
    sbatch = [
        f"--job-name=repro-{plan.name}",
        f"--output={out_dir}/slurm-%j.out",
        f"--nodes={nnodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus}",
        f"--time={options.time}",
        f"--signal=B:USR1@{signal_margin(plan, options)}",  # B: to this script only, which asks the trainer
        "--requeue",  # this job may run again, under the same id (scontrol requeue; preemption)
        "--open-mode=append",  # every allocation appends to the same slurm-<job id>.out
    ]
    if gpus:
        sbatch.append(f"--gpus-per-node={gpus}")
    if options.account:
        sbatch.append(f"--account={options.account}")
    if options.partition:
        sbatch.append(f"--partition={options.partition}")
    if options.mem:
        sbatch.append(f"--mem={options.mem}")
    sbatch += list(options.extra)
    argv = ["python", *plan.argv[1:]]  # `python` from python_bin, which PATH puts first
    lines = [
        "#!/usr/bin/env bash",
        f"# repro cell {plan.name} (sweep {sweep_name}), written by `repro sweep run --launcher slurm`.",
        f"# Resubmit by hand with: sbatch {plan.run_dir / SLURM_DIR / SCRIPT_NAME}",
        *(f"#SBATCH {opt}" for opt in sbatch),
        *job_environment(project_dir, python_bin, home, hub_env=job_env() if plan.gpu else None),
    ]
    if not plan.gpu:
        lines.append('export REPRO_TORCH_THREADS="$SLURM_CPUS_PER_TASK"  # torch uses what the job was given')
    else:
        lines += node_check_lines(plan, nnodes)
    lines += continuation_lines(plan.run_dir, options.max_allocations, signal_margin(plan, options))
    if nnodes > 1:
        lines += ray_bootstrap(nnodes, gpus)
    lines += [
        "# the cell (an interrupted run resumes from its last checkpoint), in the background so the traps run:",
        _command_line(argv) + " &",
        *continuation_tail(),
        "",
    ]
    return "\n".join(lines)


def node_check_lines(plan: CellPlan, nnodes: int) -> list[str]:
    """Bash lines that run the stack check on every node of the allocation before Ray or verl start: a node
    whose driver, CUDA, stack or disk cannot run the cell fails the job in seconds, with one line naming
    the problem and the fix, instead of at actor start (or never, as Ray schedules GPU workers anyway)."""
    assert plan.gpu is not None
    check = " ".join(_q(a) for a in plan.gpu.node_check)
    if nnodes > 1:
        check = f'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --overlap {check}'
    return [
        "# the node's stack: NVIDIA driver vs torch's CUDA, CUDA devices, vLLM/torch/transformers, attention, disk",
        check,
    ]


def job_environment(
    project_dir: str | os.PathLike[str], python_bin: Path, home: Path, hub_env: Mapping[str, str] | None = None
) -> list[str]:
    """The lines every repro job script starts with (training and evaluation alike): this checkout, its
    interpreter first on PATH, $REPRO_HOME, and the launcher and job id its attempts record; for a GPU cell
    `hub_env` (repro.weights_cache.job_env): the node reads weights and data sets offline from the shared cache."""
    lines = [
        "set -euo pipefail",
        f"cd {_q(project_dir)}",
        f'export PATH={_q(python_bin)}:"$PATH"',
        f"export REPRO_HOME={_q(home)}",
        "export REPRO_LAUNCHER=slurm",
        'export REPRO_JOB_ID="$SLURM_JOB_ID"',
        "export PYTHONUNBUFFERED=1",
    ]
    if hub_env:
        lines.append("# the node never asks the Hugging Face Hub: what it needs was cached at submission")
        lines += [f"export {name}={_q(value)}" for name, value in hub_env.items()]
    return lines


def script_path(plan: CellPlan) -> Path:
    return plan.run_dir / SLURM_DIR / SCRIPT_NAME


def _run(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    if shutil.which(argv[0]) is None:
        raise ReproError(f"{argv[0]} is not on PATH; run the Slurm launcher on a Slurm login node")
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ReproError(f"`{' '.join(argv)}` did not answer within {timeout:.0f}s; is slurmctld up?") from None


@dataclass
class SlurmScheduler:
    options: SlurmOptions = field(default_factory=SlurmOptions)
    project_dir: Path = field(default_factory=Path.cwd)
    python_bin: Path | None = None
    name: str = "slurm"

    def check(self) -> None:
        for tool in ("sbatch", "scontrol", "scancel"):
            if shutil.which(tool) is None:
                raise ReproError(f"{tool} is not on PATH; run the Slurm launcher on a Slurm login node")

    def write_script(self, plan: CellPlan, sweep_name: str) -> Path:
        path = script_path(plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = render_script(
            plan, self.options, sweep_name=sweep_name, project_dir=self.project_dir, python_bin=self.python_bin
        )
        write_text(path, text)
        path.chmod(0o755)
        return path

    def submit(self, plan: CellPlan, sweep_name: str) -> dict[str, Any]:
        path = self.write_script(plan, sweep_name)
        result = _run(["sbatch", "--parsable", str(path)])
        if result.returncode != 0:
            raise ReproError(f"sbatch refused {path}: {(result.stderr or result.stdout).strip()[:300]}")
        job_id = result.stdout.strip().split(";")[0]
        return {"launcher": "slurm", "job_id": job_id, "submitted": now(), "sweep": sweep_name, "script": str(path)}

    def state(self, record: dict[str, Any]) -> JobState:
        job_id = str(record["job_id"])
        try:
            result = _run(["scontrol", "show", "job", job_id, "-o"])
        except ReproError as exc:
            return JobState("unknown", str(exc))
        if result.returncode != 0:  # Slurm forgets a job MinJobAge (300 s) after it ends
            return JobState("unknown", "no longer known to Slurm")
        match = re.search(r"\bJobState=(\S+)", result.stdout)
        word = match.group(1) if match else "?"
        if word in _QUEUED:
            return JobState("queued", word)
        if word in _RUNNING:
            return JobState("running", word)
        if word == "COMPLETED":
            return JobState("finished", word)
        if word == "CANCELLED":
            return JobState("cancelled", word)
        reason = re.search(r"\bReason=(\S+)", result.stdout)
        return JobState("failed", word + (f" ({reason.group(1)})" if reason and reason.group(1) != "None" else ""))

    def cancel(self, record: dict[str, Any]) -> None:
        result = _run(["scancel", str(record["job_id"])])
        if result.returncode != 0:
            raise ReproError(f"scancel {record['job_id']} failed: {result.stderr.strip()[:300]}")
