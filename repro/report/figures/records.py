"""Eval records of run folders, shared by the pass@k and signal-loss figures: one checkpoint's records per
benchmark, and the samples and correct answers per problem that both figures' unbiased estimators take."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from repro.evaluation.runner import read_records

__all__ = ["CORRECT_THRESHOLD", "problem_counts", "run_records"]

CORRECT_THRESHOLD = 0.5  # eval scores are 0/1; a record counts as correct above this


def problem_counts(records: Iterable[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Per problem (benchmark, problem_id): samples n and correct c; a repeated sample index counts once."""
    problems: dict[tuple[str, str], dict[int, bool]] = {}
    for r in records:
        key = (str(r.get("benchmark", "")), str(r["problem_id"]))
        problems.setdefault(key, {})[int(r["sample_index"])] = float(r["score"]) > CORRECT_THRESHOLD
    n = np.array([len(s) for s in problems.values()], dtype=int)
    c = np.array([sum(s.values()) for s in problems.values()], dtype=int)
    return n, c


def run_records(run: Path, step: int | None = None) -> dict[str, list[dict]]:
    """Eval records per benchmark of a run's checkpoint (the latest evaluated one when step is None)."""
    folders = {}
    for p in (run / "eval").glob("global_step_*"):
        suffix = p.name.removeprefix("global_step_")
        if p.is_dir() and suffix.isdigit():
            folders[int(suffix)] = p
    if not folders:
        return {}
    chosen = folders.get(step) if step is not None else folders[max(folders)]
    if chosen is None:
        return {}
    out = {}
    for f in sorted(chosen.glob("*.jsonl")):
        records, _ = read_records(f)
        if records:
            out[f.stem] = records
    return out
