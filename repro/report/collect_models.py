"""Collect's model run folders (`repro eval NAME` of a released checkpoint or a base model): the marker read into
a runs-table row whose state is its kind, and eval rows under a method label of their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repro.errors import ReproError
from repro.evaluation.runner import BASE_MODEL, MODEL_EVAL_MARKER, RELEASED_CHECKPOINT
from repro.report.collect_eval import _summary_rows
from repro.report.collect_runs import RunInfo, _run_info
from repro.report.schema import BASE_MODEL_LABEL, NO_PROMPT_SET, RELEASED_SUFFIX

MODEL_STEP = 0  # checkpoint_step of a model run folder's rows: the model as evaluated


def released_label(method: str) -> str:
    """The method column of a released checkpoint's rows: beside, never averaged with, trained runs."""
    return method + RELEASED_SUFFIX


def _read_model_folder(folder: Path, warnings: list[str]) -> tuple[RunInfo, list[dict]]:
    """A model run folder -> its RunInfo (state = its kind) and eval rows; ReproError(reason) if unreadable."""
    try:
        marker = json.loads((folder / MODEL_EVAL_MARKER).read_text())
    except (OSError, ValueError) as exc:
        raise ReproError(f"{MODEL_EVAL_MARKER} is unreadable ({type(exc).__name__})") from None
    if not isinstance(marker, dict) or marker.get("kind") not in (RELEASED_CHECKPOINT, BASE_MODEL):
        raise ReproError(f"{MODEL_EVAL_MARKER} names no kind {RELEASED_CHECKPOINT} or {BASE_MODEL}")
    kind = marker["kind"]
    if not isinstance(marker.get("backbone"), str) or (kind == RELEASED_CHECKPOINT and not marker.get("method")):
        raise ReproError(f"{MODEL_EVAL_MARKER} lacks the backbone or the method")
    released = kind == RELEASED_CHECKPOINT
    keys: dict[str, Any] = {
        "run": folder.name,
        "backbone": marker["backbone"],
        "method": released_label(str(marker["method"])) if released else BASE_MODEL_LABEL,
        "prompt_set": str(marker.get("prompt_set")) if released else NO_PROMPT_SET,
        "seed": int(marker.get("eval_seed") or 0),
    }
    rows: list[dict] = []
    where = f"{folder.name}/eval/summary.json"
    summary_path = folder / "eval" / "summary.json"
    if not summary_path.exists():
        warnings.append(f"{where} does not exist (an unfinished `repro eval`?); {folder.name} has no eval rows")
    else:
        try:
            rows = _summary_rows(json.loads(summary_path.read_text()), keys, MODEL_STEP)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            warnings.append(f"{where} is unreadable ({type(exc).__name__}: {exc}); {folder.name} has no eval rows")
    for row in rows:
        row.update(origin=kind, model=marker.get("key") or folder.name)
    info = _run_info(
        folder,
        keys,
        kind,
        steps_logged=0,
        corrupt_lines=0,
        duplicate_steps=0,
        metrics_files=0,
        eval_checkpoints=(MODEL_STEP,) if rows else (),
    )
    return info, rows
