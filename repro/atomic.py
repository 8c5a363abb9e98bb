"""Atomic file writes: a crash or a full disk mid-write leaves the old file (or none), never half a file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a new file inside `path` survive a power loss, not just a process kill."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_with(path: str | os.PathLike[str], writer: Callable[[IO[bytes]], None]) -> Path:
    """Let `writer` fill a temp file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; the final file gets ordinary permissions
        with os.fdopen(fd, "wb") as handle:
            writer(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    return write_with(path, lambda handle: handle.write(text.encode()))


def drop_torn_tail(path: str | os.PathLike[str]) -> int:
    """Cut a final line that has no newline (a write killed half way); returns the bytes dropped."""
    path = Path(path)
    if not path.exists():
        return 0
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    keep = data.rfind(b"\n") + 1
    with open(path, "r+b") as handle:
        handle.truncate(keep)
    return len(data) - keep


def append_lines(handle: IO[str], lines: list[str]) -> None:
    """Append whole lines and fsync: once this returns, a kill cannot take them back."""
    if lines:
        handle.write("\n".join(lines) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_records(path: str | os.PathLike[str], needs: str | None = None) -> list[dict[str, Any]]:
    """The JSON objects of an append-only JSON-lines file, oldest first: [] when it does not exist, and a line
    torn by a kill mid-append (or anything not an object, or one lacking the field `needs`) is skipped, since
    such files are read while their writers may be dying."""
    try:
        lines = Path(path).read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and (needs is None or record.get(needs)):
            out.append(record)
    return out
