"""Side files beside a verl attempt's metrics, for checking what verl actually did.

verl's file logger writes `attempt-NNN.jsonl` at `$VERL_FILE_LOGGER_PATH`; the plugin puts what verl's
metrics cannot hold beside it as `attempt-NNN.<kind>.jsonl`, one JSON object a line:
- `rollout`: every weight update the CPU rollout server received (version, step, weight digest);
- `update` (only with `REPRO_AUDIT_UPDATES=1`): the rows the `reinforce_ada` estimator was handed, with
  their uid, score, pool mean, weight and advantage: the update batch verl trains on, row by row.
Every process that writes has the variable (it travels in Ray's runtime env); none is written without it.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

LOGGER_ENV = "VERL_FILE_LOGGER_PATH"
UPDATES_ENV = "REPRO_AUDIT_UPDATES"
_LOCK = threading.Lock()


def side_file(kind: str, metrics_path: str | os.PathLike | None = None) -> Path | None:
    target = metrics_path or os.environ.get(LOGGER_ENV)
    if not target:
        return None
    path = Path(target)
    return path.with_name(f"{path.stem}.{kind}.jsonl")


def append(kind: str, record: dict[str, Any]) -> Path | None:
    """Append one record; flushed at once, since a killed attempt should keep what it wrote."""
    path = side_file(kind)
    if path is None:
        return None
    line = json.dumps(record, sort_keys=True) + "\n"
    with _LOCK, open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
    return path


def read(kind: str, metrics_path: str | os.PathLike) -> list[dict[str, Any]]:
    path = side_file(kind, metrics_path)
    if path is None or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def updates_enabled() -> bool:
    return os.environ.get(UPDATES_ENV, "") == "1"
