"""`repro sweep run`, `eval` and `retry-failed`: launch a sweep file's grid; the launch itself is in
sweep_launch.py, and `repro status` / `repro cancel` (wired from here by repro/cli.py) in sweep_status.py."""

from __future__ import annotations

from typing import Any

import typer

from repro.commands.options import takes
from repro.commands.sweep_launch import _Launch, _launch
from repro.commands.sweep_options import (
    BATCH,
    DRY_RUN,
    EVAL_CHECKPOINTS,
    EVALUATE,
    FILE,
    LAUNCHER,
    MAX_ALLOCATIONS,
    MAX_PARALLEL,
    POLL,
    RAY,
    REQUIRE_FLASH_ATTN,
    RETRIES,
    RUNS_ROOT,
    SIGNAL_MARGIN,
    SLURM,
    STEPS,
    WAIT,
)
from repro.commands.sweep_status import cancel, status
from repro.sweep_submit import LAUNCHABLE as LAUNCHABLE_DEFAULT

__all__ = ["app", "cancel", "eval_stage", "retry_failed", "run", "status"]  # status, cancel: for repro/cli.py

app = typer.Typer(
    help=(
        "Run a whole grid from a sweep file (sweeps/*.yaml), one `repro run` per cell.\n\n"
        "Examples:\n\n"
        "  repro sweep run sweeps/tiny.yaml --steps 20   # the CPU miniature of the paper's grid\n\n"
        "  repro status --sweep sweeps/tiny.yaml           # where every cell stands"
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@app.command("run")
@takes(
    FILE, LAUNCHER, RUNS_ROOT, MAX_PARALLEL, STEPS, BATCH, WAIT, RETRIES.replace(default=1), POLL, DRY_RUN, *SLURM,
    SIGNAL_MARGIN, MAX_ALLOCATIONS, *RAY, EVALUATE, EVAL_CHECKPOINTS, REQUIRE_FLASH_ATTN,
)  # fmt: skip
def run(**options: Any) -> None:
    """Launch every cell of a sweep file that has not finished yet; print one line per cell.

    Each cell is `repro run --model B --method M --prompt-set P --seed S` (GPU cells: verl behind
    `python -m repro.launch.attempt`), so a finished cell is skipped and an interrupted or failed one resumes
    from its last checkpoint: running the same command again only does what is left, and two sweeps
    started at once split the work (a per-cell lock under `RUNS_ROOT/.launch/`).

    * **local** runs the cells here, `--max-parallel` at a time, and returns when they have ended.
    * **slurm** writes `RUN/slurm/job.sbatch` per cell (readable, resubmittable with `sbatch`), submits it
      and records the job id in `RUN/jobs.jsonl`; multi-node cells start a Ray cluster across the allocation
      first. Options come from the flags, else the sweep file's `slurm:` mapping.
    * **ray** submits each cell to a running Ray cluster through the Jobs API, uploading this project as
      the job's working directory. Ray has no time limit of its own: `--time` gives each job one (the cell
      checkpoints and stops `--signal-margin` before it), and with `--wait` a cell its limit stopped goes on
      in a new job, up to `--max-allocations` jobs.

    With slurm or ray the command returns once the jobs are submitted; `--wait` keeps it watching until
    every cell has ended, filling free slots (`--max-parallel`) and resubmitting failures (`--retries`).
    Exit code 1 if any cell failed.

    A sweep file with `eval:` (benchmarks, k, checkpoints: final | all | [steps], grading, shards) also
    evaluates each cell once its training has succeeded: local right after the cell's run; slurm as a job
    `--dependency=afterok:<training job>` (RUN/slurm/eval.sbatch; removed by Slurm if training fails);
    ray as a job the training job submits as its last act. A cell whose evaluation records are complete is
    not evaluated again; `repro sweep eval` runs only this stage.

    Examples:

      repro sweep run sweeps/tiny.yaml --steps 20 --max-parallel 2

      repro sweep run sweeps/paper.yaml --launcher slurm --account my-acct --partition gpu --dry-run

      repro sweep run sweeps/paper.yaml --launcher slurm --max-parallel 8 --wait --retries 2

      repro sweep run sweeps/tiny.yaml --launcher ray --ray-address http://head:8265

      repro sweep run sweeps/paper.yaml --launcher ray --time 1-00:00:00 --max-allocations 4 --wait
    """
    _launch(_Launch.from_options(options), LAUNCHABLE_DEFAULT)


@app.command("eval")
@takes(FILE, LAUNCHER, RUNS_ROOT, MAX_PARALLEL, WAIT, POLL, EVAL_CHECKPOINTS, *SLURM, *RAY)
def eval_stage(**options: Any) -> None:
    """Run only the evaluation stage (`eval:` of the sweep file) for cells trained earlier: each trained
    cell whose records are incomplete is evaluated (local) or gets an evaluation job (slurm, ray); a Slurm
    cell still training gets one behind its job (afterok). Nothing is trained.

    Examples:

      repro sweep eval sweeps/tiny.yaml --max-parallel 2

      repro sweep eval sweeps/paper.yaml --launcher slurm --partition gpu --eval-checkpoints final
    """
    options = {**options, "steps": None, "batch": None, "retries": 0, "evaluate": True}
    _launch(_Launch.from_options(options), LAUNCHABLE_DEFAULT, train=False)


@app.command("retry-failed")
@takes(
    FILE, LAUNCHER, RUNS_ROOT, MAX_PARALLEL, STEPS, BATCH, WAIT, RETRIES, POLL, *SLURM, SIGNAL_MARGIN, MAX_ALLOCATIONS,
    *RAY,
)  # fmt: skip
def retry_failed(**options: Any) -> None:
    """Launch again only the cells of a sweep that failed or were interrupted; each resumes from its last
    checkpoint. Pending cells are left for `repro sweep run`.

    Examples:

      repro sweep retry-failed sweeps/tiny.yaml

      repro sweep retry-failed sweeps/paper.yaml --launcher slurm --time 1-00:00:00
    """
    _launch(_Launch.from_options(options), ("failed", "interrupted"))
