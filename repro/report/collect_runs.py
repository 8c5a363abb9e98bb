"""Collect's run index: one run folder read into its runs-table row (its cell, state and counts, the arithmetic it
ran with) with its training and eval rows, and the runs table's frame."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from repro.cell import parse_cell
from repro.errors import ReproError
from repro.report.collect_eval import _eval_rows
from repro.report.collect_training import _cumulative_tokens, _number, _read_metrics
from repro.report.schema import RUN_KEYS
from repro.rundir import RunDir

RUNS_COLUMNS = (
    *RUN_KEYS,
    "state",
    "steps_logged",
    "corrupt_lines",
    "duplicate_steps",
    "metrics_files",
    "path",
    "arithmetic",  # the CPU arithmetic the config records (repro.arithmetic.describe), None for GPU cells
    "cpu",  # the CPU models its attempts ran on, "; "-joined, None where no attempt recorded one
)


@dataclass(frozen=True)
class RunInfo:
    """What collect found in one run folder (one row of the runs table, plus what the CLI shows)."""

    run: str
    path: Path
    backbone: str | None
    method: str | None
    prompt_set: str | None
    seed: int | None
    state: str
    steps_logged: int
    corrupt_lines: int  # metrics lines skipped: not JSON or not {"step": int, "data": {...}}
    duplicate_steps: int  # steps present in more than one attempt file (the later attempt's record is kept)
    metrics_files: int
    eval_checkpoints: tuple[int, ...]  # checkpoint steps with a readable eval summary
    arithmetic: str | None = None
    cpu: str | None = None
    until_tokens: int = 0  # a token-budget run (its rows go to the matched_* tables)


def _run_keys(name: str, config: dict) -> tuple[dict[str, Any], str | None]:
    """The run's cell keys: the config's own (CPU runs), else its "cell" name (verl runs), else the folder name."""
    keys: dict[str, Any] = {"run": name}
    if all(config.get(k) is not None for k in ("backbone", "method", "prompt_set", "seed")):
        try:
            seed = int(config["seed"])
        except (TypeError, ValueError):
            return keys, f"config.yaml has a non-integer seed {config['seed']!r}"
        keys.update(
            backbone=str(config["backbone"]), method=str(config["method"]), prompt_set=str(config["prompt_set"])
        )
        keys["seed"] = seed
        return keys, None
    cell = config.get("cell")
    parsed = (parse_cell(cell) if isinstance(cell, str) else None) or parse_cell(name)
    if parsed is None:
        return keys, (
            "config.yaml names no backbone/method/prompt_set/seed and the folder name is not "
            "<backbone>__<method>__<prompt_set>__s<seed>"
        )
    keys.update(parsed)
    return keys, None


def _run_info(folder: Path, keys: dict[str, Any], state: str, **counts: Any) -> RunInfo:
    """A runs-table row for a folder: its name, resolved path, cell keys and state, plus its counts."""
    return RunInfo(
        run=folder.name,
        path=folder.resolve(),
        backbone=keys["backbone"],
        method=keys["method"],
        prompt_set=keys["prompt_set"],
        seed=keys["seed"],
        state=state,
        **counts,
    )


def _read_run(folder: Path, warnings: list[str]) -> tuple[RunInfo, list[dict], list[dict]]:
    """One run folder -> its RunInfo, training rows and eval rows; ReproError(reason) if it cannot be read."""
    run = RunDir(folder)
    try:
        state = run.state
    except ReproError:
        raise ReproError("status.json is corrupt") from None
    except OSError as exc:
        raise ReproError(f"status.json is unreadable ({exc.strerror or exc})") from None
    try:
        config = run.config()
    except ReproError:
        raise ReproError("config.yaml is missing") from None
    except yaml.YAMLError:
        raise ReproError("config.yaml is corrupt (not YAML)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReproError(f"config.yaml is unreadable ({exc})") from None
    if not isinstance(config, dict):
        raise ReproError(f"config.yaml is corrupt (a {type(config).__name__}, not a mapping)")
    keys, problem = _run_keys(folder.name, config)
    if problem:
        raise ReproError(problem)
    try:
        metrics = _read_metrics(run)
    except OSError as exc:
        raise ReproError(f"metrics are unreadable ({exc})") from None
    training = []
    dropped: set[str] = set()
    for step in sorted(metrics.by_step):
        row: dict[str, Any] = {**keys, "step": step}
        for name, value in metrics.by_step[step].items():
            number = _number(value)
            if number is None or name in row:
                dropped.add(name)
                continue
            row[name] = number
        training.append(row)
    _cumulative_tokens(training)
    if dropped:
        warnings.append(
            f"{folder.name}: metrics not collected (not numbers, or named like a key column): "
            + ", ".join(sorted(dropped))
        )
    if metrics.corrupt:
        warnings.append(f"{folder.name}: {metrics.corrupt} corrupt metrics line(s) skipped")
    evals, eval_steps = _eval_rows(run, keys, warnings)
    info = _run_info(
        folder,
        keys,
        state,
        steps_logged=len(metrics.by_step),
        corrupt_lines=metrics.corrupt,
        duplicate_steps=metrics.duplicate_steps,
        metrics_files=metrics.files,
        eval_checkpoints=tuple(eval_steps),
        **_arithmetic_of(config, run),
        until_tokens=int((config.get("train") or {}).get("until_tokens") or 0),
    )
    return info, training, evals


def _arithmetic_of(config: dict, run: RunDir) -> dict[str, str | None]:
    """The arithmetic a CPU run's config records and the CPUs its attempts ran on (repro.arithmetic)."""
    from repro import arithmetic

    recorded = config.get("arithmetic")
    try:
        attempts = run.status().get("attempts", [])
    except (ReproError, OSError, ValueError):
        attempts = []
    cpus = sorted({a["arithmetic"]["cpu"] for a in attempts if isinstance(a.get("arithmetic"), dict)})
    return {
        "arithmetic": arithmetic.describe(recorded) if isinstance(recorded, dict) else None,
        "cpu": "; ".join(cpus) or None,
    }


def _relative(path: Path, root: Path) -> str:
    """A run folder's path relative to the runs root, with forward slashes: results/ travel between machines
    (and into git) without naming the folders of the one that collected them."""
    return Path(os.path.relpath(path, root.resolve())).as_posix()


def _runs_frame(runs: list[RunInfo], root: Path) -> pd.DataFrame:
    rows = [
        {
            "run": r.run,
            "backbone": r.backbone,
            "method": r.method,
            "prompt_set": r.prompt_set,
            "seed": r.seed,
            "state": r.state,
            "steps_logged": r.steps_logged,
            "corrupt_lines": r.corrupt_lines,
            "duplicate_steps": r.duplicate_steps,
            "metrics_files": r.metrics_files,
            "path": _relative(r.path, root),
            "arithmetic": r.arithmetic,
            "cpu": r.cpu,
        }
        for r in runs
    ]
    frame = pd.DataFrame(rows, columns=list(RUNS_COLUMNS))
    for column in ("seed", "steps_logged", "corrupt_lines", "duplicate_steps", "metrics_files"):
        frame[column] = frame[column].astype("int64")
    return frame
