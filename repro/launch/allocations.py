"""A run that spans Slurm allocations: the stop request a job script writes when its allocation is about to
end, the trainers' answer to it, and how many allocations a run took and how many steps they lost.

A paper cell trains for ~48 h; partitions stop jobs at 24-48 h. Slurm warns the job script (`--signal=
B:USR1@<margin>`) and the script asks the trainer to stop, through files in the run folder (so the request
reaches verl's trainer in its Ray actor, on whichever node, over the shared filesystem)::

    RUN/.stop-request.json    written by the job script's USR1 trap: {"reason", "requested", "job_id", ...}
    RUN/.stop-honoured.json   written by verl's trainer (repro.verl_plugin.stop_trainer) once it has saved
                              the step it stopped after: {"step", "saved_now", "honoured"}

The CPU trainer is the attempt's own process: it ends the attempt itself and exits with STOPPED_EXIT. verl's
trainer runs in a Ray actor, so it leaves the honoured file for `repro.launch.attempt`, which holds the
attempt, records it and exits with STOPPED_EXIT; the job script then requeues the job (repro.launch.slurm).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from repro.atomic import write_text
from repro.errors import ReproError
from repro.rundir import RunDir
from repro.rundir.attempts import first_logged_step, last_logged_step
from repro.rundir.status import now

STOP_REQUEST = ".stop-request.json"
STOP_HONOURED = ".stop-honoured.json"
STOPPED_EXIT = 75  # EX_TEMPFAIL: "stopped on request, not finished; run again" - what the job script requeues on


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # a torn or unreadable file still says "stop"
    return data if isinstance(data, dict) else {}


def stop_request(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The pending stop request of a run ({} when its file is unreadable), or None. One stat per call:
    cheap enough for a trainer to ask after every step."""
    path = Path(run_dir) / STOP_REQUEST
    return _read_json(path) if path.exists() else None


def request_stop(run_dir: str | os.PathLike[str], reason: str, **fields: Any) -> Path:
    """Ask a run's trainer to stop at its next step boundary (what the job script's trap writes, in bash)."""
    path = Path(run_dir) / STOP_REQUEST
    write_text(path, json.dumps({"reason": reason, "requested": now(), **fields}) + "\n")
    return path


def discard_request(run_dir: str | os.PathLike[str]) -> None:
    (Path(run_dir) / STOP_REQUEST).unlink(missing_ok=True)


def clear_stale_request(run_dir: str | os.PathLike[str], job_id: str | None) -> None:
    """Drop a stop request addressed to another job (e.g. left by an allocation whose limit came before
    the step ended, then resumed by hand), so a new attempt does not stop after its first step. A request
    of this same job is kept: its USR1 may have come while this attempt was starting."""
    request = stop_request(run_dir)
    if request is not None and str(request.get("job_id") or "") != str(job_id or ""):
        discard_request(run_dir)


def stop_reason(step: int) -> str:
    """The attempt's error text when it stopped on request: the checkpoint is of the last step trained."""
    return f"allocation ending: checkpoint at step {step}, 0 steps lost"


def honour(run_dir: str | os.PathLike[str], step: int, saved_now: bool) -> dict[str, Any]:
    """Record that the trainer stopped after `step`, whose checkpoint is saved, and retire the request."""
    record = {"step": step, "saved_now": saved_now, "honoured": now()}
    write_text(Path(run_dir) / STOP_HONOURED, json.dumps(record) + "\n")
    discard_request(run_dir)
    return record


def take_honoured(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The honoured-stop record verl's trainer left, removed as it is read (None if it stopped otherwise)."""
    path = Path(run_dir) / STOP_HONOURED
    record = _read_json(path)
    path.unlink(missing_ok=True)
    return record


def _attempt_file(run: RunDir, attempt: dict[str, Any]) -> Path | None:
    try:
        return run.metrics_dir / f"attempt-{int(attempt['n']):03d}.jsonl"
    except (KeyError, TypeError, ValueError):
        return None


def _last(run: RunDir, attempt: dict[str, Any]) -> int | None:
    """The last step an attempt logged: its record (end_attempt), else its metrics file (a killed attempt)."""
    if isinstance(attempt.get("last_logged_step"), int):
        return attempt["last_logged_step"]
    file = _attempt_file(run, attempt)
    return last_logged_step(file) if file is not None else None


def _resumed(run: RunDir, attempt: dict[str, Any]) -> int | None:
    """The checkpoint an attempt resumed from (0: from scratch), or None when it never got that far."""
    if isinstance(attempt.get("resumed_from_step"), int):
        return attempt["resumed_from_step"]
    file = _attempt_file(run, attempt)
    first = first_logged_step(file) if file is not None else None
    # the CPU trainer records a start from scratch as None; its first logged step then says so
    return None if first is None else first - 1


def allocations(run_dir: str | os.PathLike[str]) -> tuple[int, int]:
    """(attempts, steps lost) of a run: how many allocations (attempts) it took, and the steps an attempt
    logged beyond the checkpoint the next attempt resumed from (trained twice). Never raises: a missing or
    corrupt status.json counts as no attempts, a missing metrics file as nothing logged."""
    run = RunDir(run_dir)
    try:
        attempts = [a for a in run.status().get("attempts") or [] if isinstance(a, dict)]
    except (ReproError, OSError):
        return 0, 0
    lost = 0
    for i, attempt in enumerate(attempts):
        last = _last(run, attempt)
        if last is None:
            continue
        for later in attempts[i + 1 :]:  # the next attempt that got as far as loading a checkpoint
            resumed = _resumed(run, later)
            if resumed is not None:
                lost += max(0, last - resumed)
                break
    return len(attempts), lost
