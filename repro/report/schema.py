"""The tidy tables `repro collect` writes to results/, shared by collect, tables and plots.

- runs:     one row per run folder: RUN_KEYS + state, steps_logged, corrupt_lines, duplicate_steps,
            metrics_files, path (the run folder relative to the runs root, forward slashes).
- training: one row per run x step: RUN_KEYS + "step" + one column per logged metric, named exactly as
            logged (verl names such as "critic/rewards/mean", "actor/entropy", "timing_s/step", and the
            sampler's "sampler/...", "dapo/...", "est/...").
- eval:     one row per run x checkpoint step x benchmark: RUN_KEYS + "checkpoint_step", "benchmark",
            "problems", "k", "ave_at_k", and "pass@<k>" columns; plus a row with benchmark
            WEIGHTED_AVERAGE per run x checkpoint (problems = total, ave_at_k = the weighted average).
Accuracies are fractions in [0, 1]; tables multiply by 100 to sit beside the paper's percentages.
Every table is written as results/<name>.parquet (for machines) and results/<name>.csv (for people).
The labels below mark the rows of a model run folder (a released checkpoint or a base model evaluated by name)
and the training table's cumulative tokens: collect writes them, tables, figures and REPORT.md read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from repro.errors import ReproError

if TYPE_CHECKING:
    import pandas as pd

RUN_KEYS = ("run", "backbone", "method", "prompt_set", "seed")
TABLES = ("runs", "training", "eval")
# the runs trained to a token budget (a compute-matched baseline's long run, `repro run --until-tokens`), kept
# apart so that every per-step table, figure and verdict reads exactly what it read before they existed
MATCHED_TABLES = ("matched_training", "matched_eval")
WEIGHTED_AVERAGE = "weighted_average"
HELDOUT = "heldout/accuracy"  # the CPU trainer's held-out accuracy (repro.local.heldout.ACCURACY)
DEFAULT_RESULTS = "results"

ORIGIN_RUN = "run"
BASE_MODEL_LABEL = "base model"  # the method column of a base model's rows
NO_PROMPT_SET = "none"  # the prompt_set column of a base model's rows: it was trained on none
RELEASED_SUFFIX = " (released checkpoint)"
GENERATED_CUMULATIVE = "tokens/generated_cumulative"  # the x axis of the bench's matched-compute comparison


def require_columns(frame: pd.DataFrame, columns: Iterable[str], table: str) -> None:
    """A results table read back must hold the columns the schema promises: a folder collected by an older
    version (or edited by hand) fails here with the one fix, not deep inside a table or a figure."""
    lacking = [c for c in columns if c not in frame.columns]
    if lacking:
        raise ReproError(f"the {table} table lacks column(s) {', '.join(lacking)}; rerun `repro collect`")
