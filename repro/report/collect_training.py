"""Collect's training metrics: a run's attempt files merged by step, each value a number or dropped, the tokens
generated summed step by step, and the training table's frame."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from repro.report.schema import GENERATED_CUMULATIVE, RUN_KEYS
from repro.rundir import RunDir, read_attempts
from repro.sampling.metrics import GENERATED


def _number(value: Any) -> float | None:
    """A metric value as a float (None -> NaN); None for something that is not a number."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


@dataclass
class _Metrics:
    by_step: dict[int, dict] = field(default_factory=dict)
    corrupt: int = 0
    duplicate_steps: int = 0
    files: int = 0


def _read_metrics(run: RunDir) -> _Metrics:
    """Every attempt file merged by step, in attempt order: each step once, the latest attempt's record wins.
    A verl attempt's sampler file is part of its attempt, a line of a batch sampled before an interruption part of
    the attempt that trained it (`repro.rundir.read_attempts`)."""
    out = _Metrics()
    files_with: dict[int, int] = {}
    files = run.metrics_files()
    out.files = len(files)
    for records, _, corrupt in read_attempts(files):
        in_this_file: set[int] = set()
        out.corrupt += corrupt
        for step, data in records:
            in_this_file.add(step)
            out.by_step[step] = data  # a later line (same file or later attempt) replaces an earlier one
        for step in in_this_file:
            files_with[step] = files_with.get(step, 0) + 1
    out.duplicate_steps = sum(1 for count in files_with.values() if count > 1)
    return out


def _cumulative_tokens(training: list[dict[str, Any]]) -> None:
    """Each step's generated tokens summed over the steps up to it (rows in step order), where the run logged
    them (runs made before the tokens were logged have neither column)."""
    total = 0.0
    for row in training:
        if GENERATED not in row:
            return
        total += row[GENERATED]
        row[GENERATED_CUMULATIVE] = total


def _training_frame(rows: list[dict]) -> pd.DataFrame:
    metrics = sorted({name for row in rows for name in row} - {*RUN_KEYS, "step"})
    columns = [*RUN_KEYS, "step", *metrics]
    frame = pd.DataFrame(rows, columns=columns)
    frame = frame.sort_values(["run", "step"], kind="stable").reset_index(drop=True)
    frame[["seed", "step"]] = frame[["seed", "step"]].astype("int64")
    if metrics:
        frame[metrics] = frame[metrics].astype("float64")
    return frame
