"""Reading the metrics files back: attempt files in order, sampler files merged in, torn lines counted.

`collect` must survive any crash a writer can suffer, so nothing here raises on a bad line: it is
counted, and a new attempt cuts a torn final line (`repair_tail`) before it starts writing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from repro.rundir.layout import RunLayout

SAMPLER_SUFFIX = ".sampler.jsonl"  # verl runs: the plugin's sampler metrics, beside verl's attempt file
_ATTEMPT_RE = re.compile(r"attempt-(\d+)\.jsonl")


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


def attempt_number(attempt_file: Path) -> int:
    """NNN of `attempt-NNN.jsonl` (the file must be named like one)."""
    return int(_ATTEMPT_RE.fullmatch(attempt_file.name).group(1))


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
    values win on a shared name). Sampler lines of a step verl never logged in this attempt make no record
    of their own here (`read_attempts` carries them to the attempt that trained the step). Lines and corrupt
    lines count both files.
    """
    records, lines, corrupt, _ = _read_attempt(Path(file))
    return records, lines, corrupt


def _read_attempt(file: Path) -> tuple[list[tuple[int, dict]], int, int, dict[int, dict]]:
    """`read_attempt`, and this attempt's sampler lines by step (empty without a sampler file)."""
    records, lines, corrupt = _read_lines(file)
    side = sampler_file(file)
    if not side.is_file():
        return records, lines, corrupt, {}
    extra, side_lines, side_corrupt = _read_lines(side)
    by_step: dict[int, dict] = {}
    for step, data in extra:
        by_step.setdefault(step, {}).update(data)
    merged = [(step, {**by_step[step], **data}) if step in by_step else (step, data) for step, data in records]
    return merged, lines + side_lines, corrupt + side_corrupt, by_step


def read_attempts(files: list[Path]) -> list[tuple[list[tuple[int, dict]], int, int]]:
    """`read_attempt` of each attempt file in order, with sampler lines carried across attempts.

    verl's async trainer samples ahead and checkpoints the batches it sampled but has not trained; after an
    interruption the resumed attempt trains them without sampling them again, so their sampler line sits in
    the attempt that sampled them and verl's line of the step in the next. Such a line joins the first later
    record of its step that has no sampler line of its own (a step sampled again after the resume keeps its
    new line).
    """
    out, pending = [], {}
    for file in files:
        records, lines, corrupt, own = _read_attempt(Path(file))
        carried = []
        for step, data in records:
            if step in pending and step not in own:
                data = {**pending.pop(step), **data}
            carried.append((step, data))
        logged = {step for step, _ in records}
        pending.update({step: data for step, data in own.items() if step not in logged})
        out.append((carried, lines, corrupt))
    return out


def repair_tail(file: Path) -> dict | None:
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


@dataclass
class MetricsRead:
    """All attempts' metrics merged by step; bad lines are counted, never raised, so one torn file
    cannot stop `collect`."""

    by_step: dict[int, dict] = field(default_factory=dict)
    lines: int = 0  # every line read, good or bad
    corrupt: int = 0  # lines that are not JSON or not {"step": int, "data": {...}}
    duplicates: int = 0  # distinct steps logged more than once (a resume replays steps after its checkpoint)


class RunMetrics(RunLayout):
    """A run's metrics/ folder, read as one series merged over its attempts."""

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
        for records, lines, corrupt in read_attempts(self.metrics_files()):
            out.lines += lines
            out.corrupt += corrupt
            for step, data in records:
                seen[step] = seen.get(step, 0) + 1
                out.by_step[step] = data
        out.duplicates = sum(1 for count in seen.values() if count > 1)
        return out

    def logged_steps(self) -> set[int]:
        return set(self.read_metrics().by_step)
