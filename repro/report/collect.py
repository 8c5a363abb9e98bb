"""`repro collect`: every run folder under a runs root -> the tidy tables of `repro.report.schema` in results/.

Reads only the run-directory contract (DESIGN.md), so CPU and verl runs are collected alike:

- status.json and config.yaml give the run's state and its cell (backbone, method, prompt set, seed); a verl
  run's config holds {"cell", "preset", "overrides"}, so its cell comes from the cell name
  ``<backbone>__<method>__<prompt_set>__s<seed>`` (the config's "cell", else the folder name);
- metrics/attempt-NNN.jsonl are merged by step: each step appears once, a later attempt's record wins (a
  resume replays the steps after its checkpoint); unreadable lines (a torn tail after a kill, a corrupt
  line) are skipped and counted per run, never raised and never silent;
- eval/global_step_<k>/summary.json give one row per benchmark plus the weighted average.

A "model run folder" (`repro eval NAME` of a released checkpoint or a base model: model_eval.json and
eval/summary.json, no status.json) is collected too: one row in the runs table (state = its kind, no
steps) and eval rows at checkpoint_step 0 whose method is a label of their own ("seq-balance (released
checkpoint)", "base model"), so every reader keeps them apart from trained runs of the same cell. Only
when there are such rows does the eval table get two more columns, `origin` ("run", "released-checkpoint",
"base-model") and `model` (the catalog key), so collecting runs alone writes what it always wrote.

Writing is crash-safe and concurrency-safe: each results file is written to a temporary sibling, fsynced and
renamed into place (a reader sees the old file or the new one, never half of one), and the whole collect
runs under an exclusive lock on results/.collect.lock, so two collects take turns instead of interleaving.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import numbers
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from repro.atomic import fsync_dir
from repro.cell import parse_cell
from repro.errors import ReproError
from repro.evaluation.runner import BASE_MODEL, MODEL_EVAL_MARKER, RELEASED_CHECKPOINT
from repro.report.schema import MATCHED_TABLES, RUN_KEYS, TABLES, WEIGHTED_AVERAGE
from repro.rundir import RunDir, read_attempts
from repro.sampling.metrics import GENERATED

LOCK_NAME = ".collect.lock"
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
EVAL_COLUMNS = (*RUN_KEYS, "checkpoint_step", "benchmark", "problems", "k", "ave_at_k")  # then pass@<k>, k ascending

MODEL_COLUMNS = ("origin", "model")  # appended to the eval table only when a model run folder was collected
ORIGIN_RUN = "run"
BASE_MODEL_LABEL = "base model"  # the method column of a base model's rows
NO_PROMPT_SET = "none"  # the prompt_set column of a base model's rows: it was trained on none
MODEL_STEP = 0  # checkpoint_step of a model run folder's rows: the model as evaluated


RELEASED_SUFFIX = " (released checkpoint)"


def released_label(method: str) -> str:
    """The method column of a released checkpoint's rows: beside, never averaged with, trained runs."""
    return method + RELEASED_SUFFIX


_EVAL_DIR_RE = re.compile(r"global_step_(\d+)")


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


@dataclass
class CollectReport:
    runs_root: Path
    results: Path
    runs: list[RunInfo] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (folder, reason): run folders that were unreadable
    not_runs: list[tuple[str, str]] = field(default_factory=list)  # (folder, reason): folders that are not runs
    warnings: list[str] = field(default_factory=list)  # problems that cost data but not a whole run
    written: list[Path] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def corrupt(self) -> dict[str, int]:
        """Corrupt metrics lines skipped, per run."""
        return {info.run: info.corrupt_lines for info in self.runs}

    @property
    def corrupt_total(self) -> int:
        return sum(info.corrupt_lines for info in self.runs)


# ---- reading one run ----------------------------------------------------------------------------


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


GENERATED_CUMULATIVE = "tokens/generated_cumulative"  # the x axis of the bench's matched-compute comparison


def _cumulative_tokens(training: list[dict[str, Any]]) -> None:
    """Each step's generated tokens summed over the steps up to it (rows in step order), where the run logged
    them (runs made before the tokens were logged have neither column)."""
    total = 0.0
    for row in training:
        if GENERATED not in row:
            return
        total += row[GENERATED]
        row[GENERATED_CUMULATIVE] = total


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


# ---- the tables ---------------------------------------------------------------------------------


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


def _training_frame(rows: list[dict]) -> pd.DataFrame:
    metrics = sorted({name for row in rows for name in row} - {*RUN_KEYS, "step"})
    columns = [*RUN_KEYS, "step", *metrics]
    frame = pd.DataFrame(rows, columns=columns)
    frame = frame.sort_values(["run", "step"], kind="stable").reset_index(drop=True)
    frame[["seed", "step"]] = frame[["seed", "step"]].astype("int64")
    if metrics:
        frame[metrics] = frame[metrics].astype("float64")
    return frame


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


# ---- writing ------------------------------------------------------------------------------------


@contextlib.contextmanager
def results_lock(results: Path, shared: bool = False) -> Iterator[None]:
    """Hold results/.collect.lock: exclusive while collect writes; shared for a reader wanting one version."""
    fd = os.open(results / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)  # blocks until the other collect is done
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _stage(path: Path, write: Callable[[Path], None]) -> Path:
    """Write a complete, fsynced temporary sibling of `path`; the caller renames it into place."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_tables(tables: dict[str, pd.DataFrame], results: Path) -> list[Path]:
    """Write every table as <name>.parquet and <name>.csv, each atomically; the caller holds the lock.

    All temporary files are written and fsynced first and only then renamed into place, so a failure while
    writing (disk full, a crash) leaves every previous file as it was and no temporary file behind.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for name, frame in tables.items():
            for target, write in (
                (results / f"{name}.parquet", lambda p, f=frame: f.to_parquet(p, index=False, engine="pyarrow")),
                (results / f"{name}.csv", lambda p, f=frame: f.to_csv(p, index=False)),
            ):
                staged.append((_stage(target, write), target))
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(results)
    return [target for _, target in staged]


def read_results(results: str | os.PathLike[str] = "results") -> dict[str, pd.DataFrame]:
    """The tables a collect wrote (parquet), read under a shared lock so all come from the same collect."""
    results = Path(results)
    missing = [name for name in TABLES if not (results / f"{name}.parquet").exists()]
    if missing:
        raise ReproError(f"{results} has no {', '.join(missing)} table; run `repro collect` first")
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):  # a read-only copy of results/ is read without the lock
            stack.enter_context(results_lock(results, shared=True))
        tables = {name: pd.read_parquet(results / f"{name}.parquet") for name in TABLES}
        for name in MATCHED_TABLES:  # absent from results collected before token budgets
            if (results / f"{name}.parquet").exists():
                tables[name] = pd.read_parquet(results / f"{name}.parquet")
        return tables


# ---- collect ------------------------------------------------------------------------------------


def _scan(runs_root: Path, report: CollectReport) -> list[Path]:
    """Run folders and model run folders to read, sorted by name; everything else goes to report.not_runs."""
    from repro.launch.local import LAUNCH_DIR

    folders = []
    for entry in sorted(runs_root.iterdir(), key=lambda p: p.name):
        if not entry.is_dir() or entry.name == LAUNCH_DIR:  # the sweep launchers' logs and locks: expected
            continue
        if entry.name.startswith("."):
            report.not_runs.append((entry.name, "hidden (a run being created, or not ours)"))
        elif not (entry / "status.json").exists() and (entry / MODEL_EVAL_MARKER).exists():
            folders.append(entry)
        elif not (entry / "status.json").exists():
            report.not_runs.append((entry.name, "no status.json"))
        elif ".replaced-" in entry.name:
            report.not_runs.append((entry.name, "moved aside by --overwrite"))
        else:
            folders.append(entry)
    return folders


def collect(runs_root: str | os.PathLike[str], results: str | os.PathLike[str]) -> CollectReport:
    """Read every run folder under `runs_root` and write the runs, training and eval tables to `results`.

    Raises ReproError (one line) when there is no run folder to collect or `results` cannot be a folder.
    Unreadable runs are listed in `report.skipped` with the reason; corrupt metrics lines are skipped and
    counted per run (`report.corrupt`).
    """
    runs_root, results = Path(runs_root), Path(results)
    if not runs_root.is_dir():
        raise ReproError(f"no run folders under {runs_root} (it does not exist); run `repro run ...` first")
    if results.exists() and not results.is_dir():
        raise ReproError(f"--results {results} is a file, not a folder; pass another --results")
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReproError(f"cannot create --results {results} ({exc.strerror or exc}); pass another --results") from None
    report = CollectReport(runs_root=runs_root, results=results)
    with results_lock(results):  # scan inside the lock too: the collect that writes last read last
        folders = _scan(runs_root, report)
        if not folders:
            raise ReproError(f"no run folders under {runs_root}; run `repro run ...` first")
        training: list[dict] = []
        evals: list[dict] = []
        matched_training: list[dict] = []
        matched_evals: list[dict] = []
        for folder in folders:
            try:
                if (folder / "status.json").exists():
                    info, run_training, run_evals = _read_run(folder, report.warnings)
                else:
                    (info, run_evals), run_training = _read_model_folder(folder, report.warnings), []
            except ReproError as exc:
                report.skipped.append((folder.name, str(exc)))
                continue
            report.runs.append(info)
            (matched_training if info.until_tokens else training).extend(run_training)
            (matched_evals if info.until_tokens else evals).extend(run_evals)
        if not report.runs:
            reasons = "; ".join(f"{name}: {why}" for name, why in report.skipped)
            raise ReproError(f"no readable run folders under {runs_root} ({reasons})")
        report.tables = {
            "runs": _runs_frame(report.runs, runs_root),
            "training": _training_frame(training),
            "eval": _eval_frame(evals),
            "matched_training": _training_frame(matched_training),
            "matched_eval": _eval_frame(matched_evals),
        }
        report.written = write_tables(report.tables, results)
    return report
