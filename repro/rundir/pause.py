"""Pause points: hold a run at a named moment so a rehearsal (or a test) can end its allocation exactly there.

A job's end can land anywhere: while the attempt starts, mid-step, mid-save, during the evaluation, after
the last step. Waiting for a time limit to happen to fall at one of those moments makes a test depend on the
machine's speed; instead the process stops at the moment itself and waits to be ended there (a SIGTERM, the
real time limit through `scontrol update EndTime=now`, a USR1 warning) or released::

    REPRO_PAUSE_AT="start,step:2,save:4,end"   # the moments, comma-separated; `name` or `name:step`

Each moment fires once per run folder: pausing writes ``RUN/.pauses/<name>[-<step>]`` (the pid and the time),
so the next allocation of the same job, which inherits the same environment, goes past it. The file
``<name>[-<step>].release`` beside it lets the paused process go on (after a warning, say: the trainer then
gets to its step boundary). A pause that nobody ends gives up after REPRO_PAUSE_S seconds (600 by default)
and the run goes on, so a forgotten variable cannot hang a job.
Without REPRO_PAUSE_AT nothing here runs but one environment lookup.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

PAUSE_ENV = "REPRO_PAUSE_AT"
PAUSE_SECONDS_ENV = "REPRO_PAUSE_S"
PAUSES_DIR = ".pauses"
MOMENTS = ("start", "step", "save", "end", "eval")  # where the code calls `pause_at`
_POLL_S = 0.05


def _wanted(moment: str, step: int | None) -> bool:
    names = {part.strip() for part in os.environ.get(PAUSE_ENV, "").split(",") if part.strip()}
    return moment in names or (step is not None and f"{moment}:{step}" in names)


def pause_file(run_dir: str | os.PathLike[str], moment: str, step: int | None = None) -> Path:
    """The file a pause at `moment` (of `step`) writes in the run folder."""
    return Path(run_dir) / PAUSES_DIR / (moment if step is None else f"{moment}-{step}")


def release(run_dir: str | os.PathLike[str], moment: str, step: int | None = None) -> None:
    """Let a process paused at `moment` go on."""
    path = pause_file(run_dir, moment, step)
    path.with_name(path.name + ".release").write_text("")


def pause_at(
    run_dir: str | os.PathLike[str],
    moment: str,
    step: int | None = None,
    go_on: Callable[[], bool] = lambda: False,
) -> bool:
    """Wait here if REPRO_PAUSE_AT names this moment and it has not fired in this folder yet; True if it
    paused. Signals are delivered meanwhile: a SIGTERM handler that raises ends the wait with its exception,
    one that only takes note ends it through `go_on`."""
    if PAUSE_ENV not in os.environ or not _wanted(moment, step):
        return False
    path = pause_file(run_dir, moment, step)
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "paused": time.time()}) + "\n")
    os.replace(tmp, path)  # whole or absent: the test waits for this file
    released = path.with_name(path.name + ".release")
    give_up = time.monotonic() + float(os.environ.get(PAUSE_SECONDS_ENV, "600"))
    while not released.exists() and not go_on() and time.monotonic() < give_up:
        time.sleep(_POLL_S)
    return True
