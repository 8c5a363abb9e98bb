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

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from repro.errors import ReproError
from repro.evaluation.runner import MODEL_EVAL_MARKER
from repro.report.collect_eval import _eval_frame
from repro.report.collect_models import _read_model_folder
from repro.report.collect_runs import RunInfo, _read_run, _runs_frame
from repro.report.collect_training import _training_frame
from repro.report.results_files import results_lock, write_tables


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
