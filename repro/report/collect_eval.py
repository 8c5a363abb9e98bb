"""Collect's evaluation records: every eval/global_step_<k>/summary.json of a run (and a model run folder's
eval/summary.json) as one row per benchmark plus the weighted average, and the eval table's frame."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pandas as pd

from repro.report.schema import ORIGIN_RUN, RUN_KEYS, WEIGHTED_AVERAGE
from repro.rundir import RunDir

EVAL_COLUMNS = (*RUN_KEYS, "checkpoint_step", "benchmark", "problems", "k", "ave_at_k")  # then pass@<k>, k ascending

MODEL_COLUMNS = ("origin", "model")  # appended to the eval table only when a model run folder was collected

_EVAL_DIR_RE = re.compile(r"global_step_(\d+)")


def _eval_rows(run: RunDir, keys: dict[str, Any], warnings: list[str]) -> tuple[list[dict], list[int]]:
    """Rows of the eval table for every eval/global_step_<k>/summary.json of one run."""
    rows: list[dict] = []
    steps: list[int] = []
    if not run.eval_dir.is_dir():
        return rows, steps
    found = []
    for entry in run.eval_dir.iterdir():
        match = _EVAL_DIR_RE.fullmatch(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    for step, folder in sorted(found):
        where = f"{keys['run']}/eval/{folder.name}/summary.json"
        summary_path = folder / "summary.json"
        if not summary_path.exists():
            warnings.append(f"{where} does not exist (an unfinished `repro eval`?); checkpoint {step} skipped")
            continue
        try:
            summary = json.loads(summary_path.read_text())
            new_rows = _summary_rows(summary, keys, step)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            warnings.append(f"{where} is unreadable ({type(exc).__name__}: {exc}); checkpoint {step} skipped")
            continue
        rows.extend(new_rows)
        steps.append(step)
    return rows, steps


def _pass_columns(pass_at_k: Any) -> dict[str, float]:
    if not pass_at_k:
        return {}
    return {f"pass@{int(k)}": float(v) if v is not None else math.nan for k, v in dict(pass_at_k).items()}


def _summary_rows(summary: dict, keys: dict[str, Any], step: int) -> list[dict]:
    """One row per benchmark plus the weighted-average row; raises on a summary of the wrong shape."""
    benchmarks = summary["benchmarks"]
    if not isinstance(benchmarks, dict) or not benchmarks:
        raise ValueError("no benchmarks in it")
    k = summary.get("k")
    rows = []
    total = 0
    for name, entry in benchmarks.items():
        problems = int(entry["problems"])
        total += problems
        row = {**keys, "checkpoint_step": step, "benchmark": str(name), "problems": problems}
        row["k"] = int(entry.get("samples_per_problem") or k)
        row["ave_at_k"] = float(entry["ave_at_k"])
        row.update(_pass_columns(entry.get("pass_at_k")))
        rows.append(row)
    weights = summary.get("weights") or summary.get("sizes")
    if isinstance(weights, dict) and weights:
        total = sum(int(v) for v in weights.values())
    average = summary.get("weighted_average")
    if average is None:  # older summaries: pool the benchmarks by their problem counts
        average = sum(r["ave_at_k"] * r["problems"] for r in rows) / max(sum(r["problems"] for r in rows), 1)
    row = {**keys, "checkpoint_step": step, "benchmark": WEIGHTED_AVERAGE, "problems": total}
    row["k"] = int(k) if k is not None else rows[0]["k"]
    row["ave_at_k"] = float(average)
    row.update(_pass_columns(summary.get("weighted_pass_at_k")))
    rows.append(row)
    return rows


def _eval_frame(rows: list[dict]) -> pd.DataFrame:
    ks = sorted({int(name.removeprefix("pass@")) for row in rows for name in row if name.startswith("pass@")})
    values = [*EVAL_COLUMNS, *(f"pass@{k}" for k in ks)]
    with_models = any("origin" in row for row in rows)
    if with_models:
        rows = [{"origin": ORIGIN_RUN, "model": None, **row} for row in rows]
    columns = [*values, *(MODEL_COLUMNS if with_models else ())]
    frame = pd.DataFrame(rows, columns=columns)
    for column in ("seed", "checkpoint_step", "problems", "k"):
        frame[column] = frame[column].astype("int64")
    for column in values[len(EVAL_COLUMNS) - 1 :]:
        frame[column] = frame[column].astype("float64")
    return frame
