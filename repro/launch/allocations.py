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

from repro.atomic import read_records, write_text
from repro.errors import ReproError
from repro.rundir import RunDir
from repro.rundir.attempts import first_logged_step, last_logged_step
from repro.rundir.status import now

STOP_REQUEST = ".stop-request.json"
STOP_HONOURED = ".stop-honoured.json"
ENDS_FILE = "slurm/allocations.jsonl"  # one line per allocation's end, written by the Slurm job scripts
DEADLINE_LOG = "deadlines.jsonl"  # one line per Ray job run under a time limit, written by repro.launch.deadline
ALLOCATION_ENV = "REPRO_ALLOCATION"  # which allocation (Slurm: 1 + the job's requeues; Ray: the job's place)
# how repro.launch.deadline's endings read beside the Slurm scripts' words
_DEADLINE_ENDS = {"stopped on request": "warning", "deadline": "time limit"}
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


def _where(moment: object, end: str) -> str:
    """Where an attempt's trainer was when its allocation ended (its record's `moment`), in words."""
    if not isinstance(moment, str) or not moment:
        return ""  # killed before it could say (a SIGKILL, or a TERM before its handler was installed)
    if moment == "finished":
        return "" if end == "finished" else " after the last step"
    if moment.startswith("step "):
        return f" during {moment}"
    if moment.startswith("after "):
        return f" {moment}"
    return f" while {moment}"  # starting, saving step N, training


def _script_ends(run_dir: Path) -> list[dict[str, Any]]:
    """Each allocation's end as the Slurm job script recorded it, else as the Ray deadline wrapper did (its
    "continued" is the Slurm script's "requeued": the submitter runs a job stopped for its limit again)."""
    ends = [r for r in read_records(run_dir / ENDS_FILE) if isinstance(r.get("allocation"), int)]
    if ends:
        return ends
    for line in read_records(run_dir / DEADLINE_LOG):
        if not isinstance(line.get("allocation"), int):
            continue
        most = line.get("max_allocations")
        continued = line.get("exit") == STOPPED_EXIT and (not isinstance(most, int) or line["allocation"] < most)
        what = str(line.get("ended_by", "?"))
        ends.append({**line, "end": _DEADLINE_ENDS.get(what, what), "continued": continued})
    return ends


def allocation_ends(run_dir: str | os.PathLike[str]) -> list[str]:
    """What ended each allocation of a run, and where its trainer was then, one phrase each, in order
    ("1: time limit while starting, requeued", "2: warning after step 4, requeued", "eval 1: time limit, requeued").
    A Slurm run's job script recorded each end (slurm/allocations.jsonl) and its attempts their moment; a run of
    another launcher has its attempts alone. Never raises."""
    run = RunDir(run_dir)
    try:
        attempts = [a for a in run.status().get("attempts") or [] if isinstance(a, dict)]
    except (ReproError, OSError):
        attempts = []
    ends = _script_ends(Path(run_dir))
    if not ends:
        return [f"{a.get('n')}: {a.get('state')}{_where(a.get('moment'), str(a.get('state')))}" for a in attempts]
    by_allocation = {(str(a.get("job_id")), a.get("allocation")): a for a in attempts if a.get("allocation")}
    out = []
    for end in ends:
        stage = "eval " if end.get("stage") == "eval" else ""
        attempt = by_allocation.get((str(end.get("job_id")), end["allocation"])) if not stage else None
        what = str(end.get("end", "?"))
        where = _where(attempt.get("moment"), what) if attempt else ""
        if attempt and not where and _last(run, attempt) is None and what != "finished":
            where = " before its first step"  # the attempt left no word and no step: it was still starting
        again = ", requeued" if end.get("requeued") else ", continued" if end.get("continued") else ""
        out.append(f"{stage}{end['allocation']}: {what}{where}{again}")
    return out
