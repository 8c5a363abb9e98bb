"""A finished run trained on in a folder of its own: how a compute-matched baseline is made (issue 45).

A baseline that generated fewer tokens by its last step than the method it is compared with keeps training
until its cumulative generated tokens reach the other's total (`until_tokens`). Retraining its first steps
from scratch would repeat them bit for bit (same seed, same data order, a learning-rate schedule that is
warm-up then constant, so it does not depend on the run's length), so the long run starts from the finished
run's last checkpoint instead, which holds everything a resume needs (weights, optimizer, scheduler, data
order, RNG states, the tokens generated so far); resuming from a checkpoint is bit-exact
(tests/test_token_budget.py). The reference's metrics files are copied too, so the new folder is the whole
long run: steps 1..N of the reference, then its own.

The new folder is not the reference's: extending in place would move the reference's final checkpoint, which
every per-step comparison reads. Only the settings that say how long the run goes may differ
(`EXTENDABLE`); anything else would make the two a different run, and is refused.

One case is not bit-identical to a straight long run: an async run's last step samples nothing ahead (there
is no next step), so the extension's first step samples with the current weights (staleness 0) where a long
run's would have been one step stale.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from repro.errors import ReproError
from repro.rundir import RunDir
from repro.rundir.config_diff import config_diff, normalise

EXTENDABLE = ("total_training_steps", "until_tokens", "keep_tokens", "save_freq")  # train.* that may differ


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    out = normalise(config)
    for section in ("train", "scaled"):  # `scaled` records how the CPU run's steps differ from the paper's
        out[section] = {k: v for k, v in (out.get(section) or {}).items() if k not in EXTENDABLE}
    return out


def check_reference(reference: Path, config: dict[str, Any]) -> RunDir:
    """The reference run folder, when it is a finished CPU run of the same cell and settings; else one line
    naming what differs."""
    run = RunDir(reference)
    if not (reference / "config.yaml").is_file():
        raise ReproError(f"--extend {reference}: not a run folder (no config.yaml); give a finished run's folder")
    if run.state != "finished":
        raise ReproError(f"--extend {reference}: that run is {run.state}, not finished; finish it first")
    if run.latest_checkpoint() is None:
        raise ReproError(f"--extend {reference}: that run has no checkpoint to start from")
    shown, total = config_diff(_comparable(run.config()), _comparable(config))
    if total:
        more = f" (and {total - len(shown)} more)" if total > len(shown) else ""
        raise ReproError(
            f"--extend {reference}: that run was trained with other settings ({'; '.join(shown)}{more}); only "
            f"{', '.join(EXTENDABLE)} may differ"
        )
    return run


def seed_from(rundir: RunDir, reference: RunDir) -> int | None:
    """Put the reference's last checkpoint and its metrics files into a new run folder that has no checkpoint
    yet (the metrics first: the checkpoint's commit is what marks the seeding done, so a kill in between
    seeds again). Returns the step it starts from, None when the folder was seeded before (a resume)."""
    if rundir.latest_checkpoint() is not None:
        return None
    step, folder = reference.latest_checkpoint()
    rundir.metrics_dir.mkdir(exist_ok=True)
    for file in sorted(reference.metrics_dir.glob("attempt-*.jsonl")):
        shutil.copyfile(file, rundir.metrics_dir / file.name)
    staging = rundir.staging_checkpoint_dir(step)
    shutil.copytree(folder, staging, dirs_exist_ok=True)
    rundir.commit_checkpoint(step, staging)
    return step
