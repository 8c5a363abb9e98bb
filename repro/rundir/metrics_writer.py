"""Writing metrics lines: one fsynced verl file-logger line per `log`, so a kill loses at most a torn tail.

Only the CPU trainer and the verl plugin write; they need none of the reading side (`metrics.py`).
"""

from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path
from typing import Any

from repro.atomic import fsync_dir


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
