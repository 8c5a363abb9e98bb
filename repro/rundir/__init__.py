"""One run = one folder; this module is the only code that reads or writes that folder's bookkeeping.

The CPU trainer and the verl launcher both write the same layout, so `collect`, tables and plots never
ask which path made a run (DESIGN.md, "The run directory is the contract")::

    <cell>/config.yaml                    resolved config (atomic write)
    <cell>/command.json                   {"argv": [...], "cwd": ...} of the command that created the run
    <cell>/status.json                    {"state", "created", "attempts": [...]}, rewritten atomically
    <cell>/metrics/attempt-001.jsonl      verl file-logger lines {"step": s, "data": {...}}, one file per
                                          attempt because verl opens its file with mode "wb"
    <cell>/metrics/attempt-001.sampler.jsonl  verl runs: the plugin's sampler metrics, same line format;
                                          readers merge them into the same attempt's step rows
    <cell>/checkpoints/global_step_<k>/   verl's naming, plus latest_checkpointed_iteration.txt
    <cell>/eval/                          evaluation results
    <cell>/run.lock                       flock held by the live attempt; its text is the holder's pid

Crash safety is the point: every file is either written atomically or appended one fsynced line at a
time, a run folder is created by renaming a complete sibling into place, and nothing is ever deleted
on the user's behalf (``--overwrite`` moves the old run aside).
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import numbers
import os
import re
import shutil
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from repro.atomic import fsync_dir, write_text
from repro.errors import ReproError

STATES = ("pending", "running", "finished", "failed", "interrupted")
END_STATES = ("finished", "failed", "interrupted")
LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's tracker file name
COMPLETE_MARKER = "COMPLETE"

_ATTEMPT_RE = re.compile(r"attempt-(\d+)\.jsonl")
SAMPLER_SUFFIX = ".sampler.jsonl"  # verl runs: the plugin's sampler metrics, beside verl's attempt file
_STEP_DIR_RE = re.compile(r"global_step_(\d+)")
# Hidden work dirs under checkpoints/: being filled, being replaced, being deleted. The pid says whose.
_WORK_DIR_RE = re.compile(r"\.(staging|old|deleting)-global_step_(\d+)-(\d+)")
_LOCK_RETRY_S = 0.3  # a concurrent `state` probe holds a shared lock for microseconds; don't call that "running"


def cell_name(backbone: str, method: str, prompt_set: str, seed: int) -> str:
    """The folder name of one grid cell; `collect` parses it back, so the separator is a double underscore."""
    return f"{backbone}__{method}__{prompt_set}__s{seed}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves, so a config difference can be named as `trainer.lr`."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out.update(_flatten(sub, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _short(value: Any, missing: bool = False) -> str:
    if missing:
        return "<absent>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _config_diff(old: dict, new: dict, limit: int = 3) -> tuple[list[str], int]:
    """Up to `limit` "key: old -> new" strings, and how many keys differ in all."""
    a, b = _flatten(old), _flatten(new)
    keys = sorted(k for k in a.keys() | b.keys() if (k in a) != (k in b) or a.get(k) != b.get(k))
    shown = [f"{k}: {_short(a.get(k), k not in a)} -> {_short(b.get(k), k not in b)}" for k in keys[:limit]]
    return shown, len(keys)


def _normalise(config: dict) -> dict:
    """The config as it will read back from config.yaml (tuples become lists), so comparisons are fair."""
    return yaml.safe_load(yaml.safe_dump(config, sort_keys=False)) or {}


def _parse_record(line: bytes) -> tuple[int, dict] | None:
    """A verl file-logger record, or None when the line is not one (bad JSON or wrong shape)."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), dict):
        return None
    step = obj.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return step, obj["data"]


def sampler_file(attempt_file: str | os.PathLike[str]) -> Path:
    """`attempt-NNN.sampler.jsonl` beside `attempt-NNN.jsonl`: where the verl plugin logs sampler metrics
    (verl's trainer owns its own metrics dict and file, so they cannot go into verl's line)."""
    path = Path(attempt_file)
    return path.with_name(path.name.removesuffix(".jsonl") + SAMPLER_SUFFIX)


def _read_lines(file: Path) -> tuple[list[tuple[int, dict]], int, int]:
    """(records in file order, lines read, corrupt lines) of one metrics file."""
    records, lines, corrupt = [], 0, 0
    for line in file.read_bytes().splitlines():
        lines += 1
        record = _parse_record(line)
        if record is None:
            corrupt += 1
        else:
            records.append(record)
    return records, lines, corrupt


def read_attempt(file: str | os.PathLike[str]) -> tuple[list[tuple[int, dict]], int, int]:
    """One attempt's records in file order, with its sampler file merged in: (records, lines, corrupt).

    A step's sampler metrics join the record(s) verl logged for that step in the same attempt (verl's
    values win on a shared name). Sampler lines of a step verl never logged in this attempt (it died
    between sampling and logging; the resumed attempt replays that step) make no record of their own.
    Lines and corrupt lines count both files.
    """
    file = Path(file)
    records, lines, corrupt = _read_lines(file)
    side = sampler_file(file)
    if side.is_file():
        extra, side_lines, side_corrupt = _read_lines(side)
        lines, corrupt = lines + side_lines, corrupt + side_corrupt
        by_step: dict[int, dict] = {}
        for step, data in extra:
            by_step.setdefault(step, {}).update(data)
        records = [(step, {**by_step[step], **data}) if step in by_step else (step, data) for step, data in records]
    return records, lines, corrupt


def _json_number(key: str, value: Any) -> int | float | None:
    """A JSON-safe number: numpy/torch scalars become Python numbers, NaN and inf become null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    item = getattr(value, "item", None)  # 0-d numpy arrays, one-element torch tensors
    if callable(item):
        scalar = item()
        if isinstance(scalar, numbers.Real):
            return _json_number(key, scalar)
    raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__}")


class MetricsWriter:
    """Appends verl file-logger lines; a line is on disk (fsynced) before `log` returns.

    Append mode rather than verl's "wb": a resumed CPU attempt gets a fresh file anyway, and append
    can never destroy lines that are already there.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existed = self.path.exists()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        if not existed:
            fsync_dir(self.path.parent)

    def log(self, step: int, data: dict[str, float]) -> None:
        """Write exactly one line ``{"step": step, "data": data}``."""
        if self._fd is None:
            raise ValueError(f"{self.path}: log() after close()")
        if not isinstance(step, numbers.Integral) or isinstance(step, bool):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        clean = {}
        for key, value in data.items():
            if not isinstance(key, str):
                raise TypeError(f"metric names must be str, got {key!r}")
            clean[key] = _json_number(key, value)
        line = (json.dumps({"step": int(step), "data": clean}, allow_nan=False) + "\n").encode()
        view = memoryview(line)
        while view:  # one write() almost always takes it all; loop for the rare short write
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class MetricsRead:
    """All attempts' metrics merged by step; bad lines are counted, never raised, so one torn file
    cannot stop `collect`."""

    by_step: dict[int, dict] = field(default_factory=dict)
    lines: int = 0  # every line read, good or bad
    corrupt: int = 0  # lines that are not JSON or not {"step": int, "data": {...}}
    duplicates: int = 0  # distinct steps logged more than once (a resume replays steps after its checkpoint)


class RunDir:
    """One run folder. `prepare` is how `repro run` gets one; `RunDir(path)` just opens it for reading."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None
        self._attempt: int | None = None  # index into status["attempts"] of the attempt this object began

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ---- layout -------------------------------------------------------------------------------

    @property
    def metrics_dir(self) -> Path:
        return self.path / "metrics"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    @property
    def _status_path(self) -> Path:
        return self.path / "status.json"

    @property
    def _lock_path(self) -> Path:
        return self.path / "run.lock"

    # ---- creation -----------------------------------------------------------------------------

    @classmethod
    def prepare(
        cls, path: str | os.PathLike[str], config: dict, command: list[str], *, overwrite: bool = False
    ) -> RunDir:
        """Create, resume, or refuse; every refusal is one ReproError line that says the fix."""
        path = Path(path)
        if path.is_symlink():
            path = path.resolve()
        new_config = _normalise(config)
        for _ in range(3):  # retried only if another process created the folder under us
            if not path.exists() or (path.is_dir() and not any(path.iterdir())):
                try:
                    return cls._create(path, new_config, command)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                        raise
                    continue
            run = cls(path)
            run._check_is_run(half_written_ok=overwrite)
            pid = run._lock_holder()
            if pid is not None:
                who = f"pid {pid}" if pid else "pid unknown"
                raise ReproError(f"run {path} is already running ({who}); wait for it or stop that process")
            if overwrite:
                run._move_aside()
                continue
            old_config = run.config()
            if old_config != new_config:
                shown, total = _config_diff(old_config, new_config)
                more = f" (and {total - len(shown)} more)" if total > len(shown) else ""
                raise ReproError(
                    f"run {path} was made with a different config ({'; '.join(shown)}{more}); "
                    "use --overwrite to start over or --run-dir for a new run"
                )
            if run.state == "finished":
                raise ReproError(f"run {path} already finished; use --overwrite to run it again")
            return run
        raise ReproError(f"run {path} keeps changing under us; is another repro run using it?")

    @classmethod
    def _create(cls, path: Path, config: dict, command: list[str]) -> RunDir:
        """Build the run in a hidden sibling and rename it into place: a run folder is whole or absent."""
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.parent / f".{path.name}.creating-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            staging.mkdir()
            for sub in ("metrics", "checkpoints", "eval"):
                (staging / sub).mkdir()
            write_text(staging / "config.yaml", yaml.safe_dump(config, sort_keys=False))
            write_text(staging / "command.json", json.dumps({"argv": list(command), "cwd": os.getcwd()}) + "\n")
            status = {"state": "pending", "created": _now(), "attempts": []}
            write_text(staging / "status.json", json.dumps(status, indent=2) + "\n")
            os.rename(staging, path)  # POSIX: replaces an empty directory, fails on a non-empty one
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fsync_dir(path.parent)
        return cls(path)

    def _check_is_run(self, *, half_written_ok: bool = False) -> None:
        """Refuse folders that are not runs, and runs whose bookkeeping is unreadable (half-written).

        A half-written run has our status.json, so --overwrite may move it aside; a folder without one
        is somebody else's and is never touched.
        """
        where = self.path
        if not where.is_dir():
            raise ReproError(f"{where} is a file, not a run directory; pass another --run-dir")
        if not self._status_path.exists():
            raise ReproError(
                f"{where} is not a repro run directory (no status.json); pass another --run-dir or remove it"
            )
        if half_written_ok:
            return
        fix = "use --overwrite to move it aside and start over, or pass another --run-dir"
        try:
            status = json.loads(self._status_path.read_text())
            ok = isinstance(status, dict) and status.get("state") in STATES and isinstance(status.get("attempts"), list)
        except (OSError, ValueError):
            ok = False
        if not ok:
            raise ReproError(f"run {where} is half-written (status.json is unreadable or corrupt); {fix}")
        try:
            config = yaml.safe_load((self.path / "config.yaml").read_text())
        except FileNotFoundError:
            raise ReproError(f"run {where} is half-written (config.yaml is missing); {fix}") from None
        except (OSError, yaml.YAMLError):
            config = None
        if not isinstance(config, dict):
            raise ReproError(f"run {where} is half-written (config.yaml is unreadable or corrupt); {fix}")

    def _move_aside(self) -> Path:
        """--overwrite never deletes: the old run becomes `<name>.replaced-<UTC time>` beside the new one."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        target = self.path.with_name(f"{self.path.name}.replaced-{stamp}")
        n = 1
        while target.exists():
            n += 1
            target = self.path.with_name(f"{self.path.name}.replaced-{stamp}-{n}")
        os.rename(self.path, target)
        return target

    # ---- reading ------------------------------------------------------------------------------

    def status(self) -> dict:
        """status.json as written (its "state" may say running for a dead process; see `state`)."""
        try:
            status = json.loads(self._status_path.read_text())
        except FileNotFoundError:
            raise ReproError(f"{self.path} is not a repro run directory (no status.json)") from None
        except ValueError:
            raise ReproError(f"run {self.path} has a corrupt status.json; move the run aside and start over") from None
        if not isinstance(status, dict):
            raise ReproError(f"run {self.path} has a corrupt status.json; move the run aside and start over")
        return status

    def config(self) -> dict:
        """The resolved config the run was created with."""
        try:
            return yaml.safe_load((self.path / "config.yaml").read_text()) or {}
        except FileNotFoundError:
            raise ReproError(f"run {self.path} has no config.yaml; move the run aside and start over") from None

    @property
    def state(self) -> str:
        """The run's state, trusting the lock over status.json: "running" with no live holder is "interrupted"."""
        state = self.status().get("state", "pending")
        if state == "running" and self._lock_fd is None and self._lock_holder() is None:
            return "interrupted"
        return state

    def metrics_files(self) -> list[Path]:
        """Attempt files in attempt order (numeric, so attempt-1000 sorts after attempt-999)."""
        if not self.metrics_dir.is_dir():
            return []
        found = []
        for entry in self.metrics_dir.iterdir():
            match = _ATTEMPT_RE.fullmatch(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
        return [p for _, p in sorted(found)]

    def read_metrics(self) -> MetricsRead:
        """Merge every attempt by step (each with its sampler file, `read_attempt`); a later record for a
        step replaces an earlier one."""
        out = MetricsRead()
        seen: dict[int, int] = {}
        for file in self.metrics_files():
            records, lines, corrupt = read_attempt(file)
            out.lines += lines
            out.corrupt += corrupt
            for step, data in records:
                seen[step] = seen.get(step, 0) + 1
                out.by_step[step] = data
        out.duplicates = sum(1 for count in seen.values() if count > 1)
        return out

    def logged_steps(self) -> set[int]:
        return set(self.read_metrics().by_step)

    # ---- attempts -----------------------------------------------------------------------------

    def _lock_holder(self) -> int | None:
        """The pid holding run.lock (0 if held but unknown), or None if nobody does.

        Probes with a shared lock so that two readers probing at once never see each other as a live run.
        """
        try:
            fd = os.open(self._lock_path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = os.pread(fd, 32, 0).decode(errors="replace").strip()
                if text.isdigit():
                    return int(text)
                try:
                    attempts = self.status().get("attempts") or [{}]
                    return int(attempts[-1].get("pid") or 0)  # 0: held, holder unknown
                except (ReproError, AttributeError, TypeError, ValueError):
                    return 0
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def _write_status(self, status: dict) -> None:
        status["updated"] = _now()
        write_text(self._status_path, json.dumps(status, indent=2) + "\n")

    def begin_attempt(self, launcher: str = "local", job_id: str | None = None) -> Path:
        """Lock the run for this process, repair torn tails, record a new attempt; return its metrics path.

        The lock fd stays open on this object: the kernel drops the lock when the process dies, which is
        how a later `state` tells a crash ("interrupted") from a live run.
        """
        if self._attempt is not None:
            raise RuntimeError(f"{self}: begin_attempt() called twice without end_attempt()")
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        deadline = time.monotonic() + _LOCK_RETRY_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                text = os.pread(fd, 32, 0).decode(errors="replace").strip()
                os.close(fd)
                raise ReproError(
                    f"run {self.path} is already running (pid {text or 'unknown'}); wait for it or stop that process"
                ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd
        try:
            status = self.status()
            attempts: list[dict] = status.setdefault("attempts", [])
            for old in attempts:  # we hold the lock, so any attempt still marked running is dead
                if old.get("state") == "running":
                    old["state"] = "interrupted"
            files = self.metrics_files()
            repaired = [r for r in (self._repair_tail(f) for f in files) if r]
            last_file = int(_ATTEMPT_RE.fullmatch(files[-1].name).group(1)) if files else 0
            n = max([len(attempts), last_file, *(int(a.get("n", 0)) for a in attempts)]) + 1
            record: dict[str, Any] = {
                "n": n,
                "started": _now(),
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "launcher": launcher,
                "job_id": job_id,
                "state": "running",
                "resumed_from_step": None,
            }
            if repaired:
                record["repaired"] = repaired
            attempts.append(record)
            status["state"] = "running"
            self._write_status(status)
        except BaseException:
            self._release()
            raise
        self._attempt = len(attempts) - 1
        self.metrics_dir.mkdir(exist_ok=True)
        return self.metrics_dir / f"attempt-{n:03d}.jsonl"

    def _repair_tail(self, file: Path) -> dict | None:
        """Cut a torn final line (a write killed midway); keep an unterminated line that is a whole record.

        A killed writer leaves a prefix of its last line. A prefix that parses as a complete record only
        lacks its newline, and dropping it could lose a step that will not be replayed (the checkpoint
        for it may already be committed), so it gets its newline instead of being cut.
        """
        data = file.read_bytes()
        if not data:
            return None
        body = data[:-1] if data.endswith(b"\n") else data
        start = body.rfind(b"\n") + 1
        last = body[start:]
        if _parse_record(last) is not None:
            if data.endswith(b"\n"):
                return None
            with open(file, "ab") as handle:
                handle.write(b"\n")
                handle.flush()
                os.fsync(handle.fileno())
            return {"file": file.name, "bytes": 0, "newline_added": True}
        with open(file, "r+b") as handle:
            handle.truncate(start)
            handle.flush()
            os.fsync(handle.fileno())
        return {"file": file.name, "bytes": len(data) - start}

    def _current(self, status: dict) -> dict:
        if self._attempt is None or self._lock_fd is None:
            raise RuntimeError(f"{self}: no attempt begun by this process")
        return status["attempts"][self._attempt]

    def set_attempt(self, **fields: Any) -> None:
        """Update the current attempt's record, e.g. ``set_attempt(resumed_from_step=40)``."""
        status = self.status()
        self._current(status).update(fields)
        self._write_status(status)

    def end_attempt(self, state: str, error: str | None = None) -> None:
        """Close the current attempt as finished / failed / interrupted and release the lock."""
        if state not in END_STATES:
            raise ValueError(f"end state must be one of {END_STATES}, got {state!r}")
        status = self.status()
        attempt = self._current(status)
        attempt.update(state=state, ended=_now(), error=error)
        status["state"] = state
        self._write_status(status)
        self._release()

    def _release(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
        self._lock_fd = None
        self._attempt = None

    # ---- checkpoints --------------------------------------------------------------------------

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_dir / f"global_step_{step}"

    def staging_checkpoint_dir(self, step: int) -> Path:
        """An empty hidden dir to fill; `commit_checkpoint` makes it visible only once it is whole."""
        staging = self.checkpoints_dir / f".staging-global_step_{step}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        return staging

    def _complete_steps(self) -> dict[int, Path]:
        if not self.checkpoints_dir.is_dir():
            return {}
        out = {}
        for entry in self.checkpoints_dir.iterdir():
            match = _STEP_DIR_RE.fullmatch(entry.name)
            if match and (entry / COMPLETE_MARKER).is_file():
                out[int(match.group(1))] = entry
        return out

    def _latest_pointer(self) -> int | None:
        try:
            return int((self.checkpoints_dir / LATEST_FILE).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        """The checkpoint to resume from.

        The tracker file wins when the dir it names exists: it is written only after a save finished (by
        `commit_checkpoint`, and by verl, whose dirs carry no COMPLETE marker). Otherwise the highest
        global_step_* dir holding COMPLETE.
        """
        pointed = self._latest_pointer()
        if pointed is not None and self.checkpoint_dir(pointed).is_dir():
            return pointed, self.checkpoint_dir(pointed)
        complete = self._complete_steps()
        if not complete:
            return None
        step = max(complete)
        return step, complete[step]

    def commit_checkpoint(self, step: int, staging: Path) -> Path:
        """Mark `staging` complete, rename it to global_step_<step>, then point the tracker file at it."""
        staging = Path(staging)
        if not staging.is_dir():
            raise ValueError(f"staging checkpoint {staging} is not a directory")
        write_text(staging / COMPLETE_MARKER, f"{step}\n")
        final = self.checkpoint_dir(step)
        old = None
        if final.exists():  # rename the old one out of the way; it is deleted only after the new one is in
            old = self.checkpoints_dir / f".old-global_step_{step}-{os.getpid()}"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
        os.rename(staging, final)
        fsync_dir(self.checkpoints_dir)
        write_text(self.checkpoints_dir / LATEST_FILE, f"{step}\n")
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def prune_checkpoints(self, keep_every: int, keep_last: int = 1) -> list[int]:
        """Delete complete checkpoints that are neither among the newest `keep_last`, nor a multiple of
        `keep_every`, nor the one the tracker file names; clear stale hidden work dirs. Returns the
        deleted steps. Incomplete global_step_* dirs are left alone (they may be verl's)."""
        if keep_every < 1 or keep_last < 0:
            raise ValueError(f"need keep_every >= 1 and keep_last >= 0, got {keep_every}, {keep_last}")
        complete = self._complete_steps()
        keep = set(sorted(complete)[-keep_last:]) if keep_last else set()
        keep |= {s for s in complete if s % keep_every == 0}
        latest = self.latest_checkpoint()
        if latest is not None:
            keep.add(latest[0])
        deleted = []
        for step in sorted(set(complete) - keep):
            # rename first: a kill midway through rmtree must not leave a gutted dir that still says COMPLETE
            doomed = self.checkpoints_dir / f".deleting-global_step_{step}-{os.getpid()}"
            os.rename(complete[step], doomed)
            shutil.rmtree(doomed)
            deleted.append(step)
        if self.checkpoints_dir.is_dir():
            for entry in self.checkpoints_dir.iterdir():
                match = _WORK_DIR_RE.fullmatch(entry.name)
                if match and int(match.group(3)) != os.getpid() and not _pid_alive(int(match.group(3))):
                    shutil.rmtree(entry, ignore_errors=True)
        return deleted
