"""The options the `repro sweep` commands share, and the defaults and state colours they need: one place for
each option's name, help text and default, so `run`, `eval` and `retry-failed` cannot drift apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from repro.commands.options import parameter

LAUNCHERS = ("local", "slurm", "ray")

_STYLE = {
    "finished": "green",
    "failed": "red",
    "skipped": "dim",
    "running elsewhere": "yellow",
    "running": "yellow",
    "interrupted": "magenta",
    "pending": "dim",
    "unknown": "red",
    "done": "green",
    "partial": "yellow",
    "waiting": "dim",
    "queued": "yellow",
    "not started": "red",
}


FileArg = Annotated[Path, typer.Argument(help="Sweep file, e.g. sweeps/tiny.yaml.")]
LauncherOpt = Annotated[
    str,
    typer.Option(
        "--launcher", help="local (subprocesses here), slurm (one sbatch job per cell) or ray (Ray Jobs API)."
    ),
]
RunsRootOpt = Annotated[Path, typer.Option("--runs-root", help="Folder holding one folder per run.")]
ParallelOpt = Annotated[
    int | None,
    typer.Option(
        "--max-parallel",
        min=1,
        help="Cells in flight at once (local default: the number of CPU cores; slurm/ray default: no limit).",
    ),
]
StepsOpt = Annotated[int | None, typer.Option("--steps", min=1, help="CPU cells: training steps (default: catalog).")]
BatchOpt = Annotated[int | None, typer.Option("--batch", min=1, help="CPU cells: prompts per step (default: catalog).")]
WaitOpt = Annotated[
    bool,
    typer.Option(
        "--wait/--no-wait",
        help="slurm/ray: keep watching until every cell has ended, filling free slots and retrying failures.",
    ),
]
RetriesOpt = Annotated[
    int, typer.Option("--retries", min=0, help="slurm/ray with --wait: resubmissions of a failed cell.")
]
PollOpt = Annotated[float, typer.Option("--poll", min=0.1, help="slurm/ray with --wait: seconds between checks.")]
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Write (slurm) or print (local, ray) what would be launched, and launch nothing.",
    ),
]
AccountOpt = Annotated[str | None, typer.Option("--account", help="slurm: --account (else the sweep file's).")]
PartitionOpt = Annotated[str | None, typer.Option("--partition", help="slurm: --partition.")]
TimeOpt = Annotated[
    str | None,
    typer.Option(
        "--time",
        help="slurm: time limit per allocation, e.g. 2-00:00:00 (a cell spans allocations by requeueing). ray: a "
        "limit per job, none by default; the cell checkpoints and stops before it and, with --wait, goes on in a new "
        "job, e.g. --launcher ray --time 1-00:00:00 --wait.",
    ),
]
GpusOpt = Annotated[
    int | None, typer.Option("--gpus-per-node", min=1, help="slurm: GPUs per node (default: the backbone's).")
]
CpusOpt = Annotated[int | None, typer.Option("--cpus-per-task", min=1, help="slurm: CPUs per node.")]
MemOpt = Annotated[str | None, typer.Option("--mem", help="slurm: memory per node, e.g. 0 (all) or 400G.")]
MarginOpt = Annotated[
    int | None,
    typer.Option(
        "--signal-margin",
        min=1,
        help="slurm, and ray with --time: seconds before the time limit when the cell is asked to checkpoint and "
        "stop, then requeued or continued (default: a GPU cell's step plus its save; 60 for CPU cells; at most half "
        "the limit), e.g. --signal-margin 1800.",
    ),
]
AllocationsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-allocations",
        min=1,
        help="slurm: allocations a cell may span by requeueing; ray with --time: jobs it may span by continuing "
        "(default 4), e.g. --max-allocations 8.",
    ),
]
RayAddressOpt = Annotated[
    str | None, typer.Option("--ray-address", help="ray: the Jobs API address (default http://127.0.0.1:8265).")
]
EvalOpt = Annotated[
    bool,
    typer.Option(
        "--eval/--no-eval",
        help="Run the sweep file's evaluation stage (`eval:`) after each cell's training (default: yes).",
    ),
]
RequireFlashAttnOpt = Annotated[
    bool,
    typer.Option(
        "--require-flash-attn",
        help="GPU cells: fail a job whose node cannot import flash-attn, instead of running it with sdpa "
        "(slower, same result; the default).",
    ),
]
EvalCheckpointsOpt = Annotated[
    str | None,
    typer.Option(
        "--eval-checkpoints",
        help="Override the sweep file's eval.checkpoints: final, all, or a comma list of steps.",
    ),
]
PythonOpt = Annotated[
    str | None, typer.Option("--python", help="ray: the Python interpreter on the cluster (default: python).")
]

# Each option as the commands take it (`repro.commands.options.takes`): its name there and its default.
FILE = parameter("file", FileArg)
LAUNCHER = parameter("launcher", LauncherOpt, "local")
RUNS_ROOT = parameter("runs_root", RunsRootOpt, Path("runs"))
MAX_PARALLEL = parameter("max_parallel", ParallelOpt, None)
STEPS = parameter("steps", StepsOpt, None)
BATCH = parameter("batch", BatchOpt, None)
WAIT = parameter("wait", WaitOpt, False)
RETRIES = parameter("retries", RetriesOpt, 0)  # `repro sweep run` retries once
POLL = parameter("poll", PollOpt, 30.0)
DRY_RUN = parameter("dry_run", DryRunOpt, False)
ACCOUNT = parameter("account", AccountOpt, None)
PARTITION = parameter("partition", PartitionOpt, None)
TIME = parameter("time", TimeOpt, None)
GPUS_PER_NODE = parameter("gpus_per_node", GpusOpt, None)
CPUS_PER_TASK = parameter("cpus_per_task", CpusOpt, None)
MEM = parameter("mem", MemOpt, None)
SIGNAL_MARGIN = parameter("signal_margin", MarginOpt, None)
MAX_ALLOCATIONS = parameter("max_allocations", AllocationsOpt, None)
RAY_ADDRESS = parameter("ray_address", RayAddressOpt, None)
PYTHON = parameter("python", PythonOpt, None)
EVALUATE = parameter("evaluate", EvalOpt, True)
EVAL_CHECKPOINTS = parameter("eval_checkpoints", EvalCheckpointsOpt, None)
REQUIRE_FLASH_ATTN = parameter("require_flash_attn", RequireFlashAttnOpt, False)
SLURM = (ACCOUNT, PARTITION, TIME, GPUS_PER_NODE, CPUS_PER_TASK, MEM)  # in the order every command lists them
RAY = (RAY_ADDRESS, PYTHON)
