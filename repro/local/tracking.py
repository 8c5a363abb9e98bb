"""The CPU trainer's experiment loggers beyond its own metrics file: verl's `Tracking` (tensorboard, wandb)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from repro.local.config import RunConfig
from repro.loggers import TENSORBOARD_ENV, TENSORBOARD_FOLDER, tracking_backends
from repro.rundir import RunDir


def open_tracking(config: RunConfig, rundir: RunDir, loggers: Sequence[str]):
    """verl's Tracking over the chosen backends other than file and console (see repro.loggers), or None
    when there are none. TensorBoard writes <run folder>/tensorboard (TENSORBOARD_DIR is read when the
    adapter is built, then put back); verl's "Saving tensorboard log" line goes to stderr, away from the
    command's stdout."""
    backends = tracking_backends(loggers)
    if not backends:
        return None
    from verl.utils.tracking import Tracking

    previous = os.environ.get(TENSORBOARD_ENV)
    os.environ[TENSORBOARD_ENV] = str(Path(rundir.path) / TENSORBOARD_FOLDER)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            # Tracking reads config["trainer"] (wandb_proxy); the run's own config goes to wandb beside it
            return Tracking(
                "repro", rundir.path.name, default_backend=backends, config={"trainer": {}, **config.to_dict()}
            )
    finally:
        if previous is None:
            os.environ.pop(TENSORBOARD_ENV, None)
        else:
            os.environ[TENSORBOARD_ENV] = previous
