"""The Reinforce-Ada paper's reported numbers (arXiv 2510.04996), loaded from `paper_tables/`.

The numbers are copied into the repository as CSV (paper_tables/README.md names the table or figure of
each file), so comparisons with the paper never depend on files outside the project. Percentages are
as printed in the paper (one decimal); seconds are per training step on 8xH100.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from repro.errors import ReproError

__all__ = [
    "BENCHMARKS",
    "PAPER_STAND_IN",
    "PAPER_TABLES_DIR",
    "benchmark_sizes",
    "signal_loss",
    "step_times",
    "table1",
    "weighted_averages",
]

PAPER_TABLES_DIR = Path(__file__).resolve().parents[1] / "paper_tables"
# The paper's backbone a backbone it did not train (every CPU miniature) is compared against: its smallest, in the
# report's verdicts and Table 2's step-time bars alike.
PAPER_STAND_IN = "qwen2.5-math-1.5b"
# Table 1's benchmark columns, in the paper's order.
BENCHMARKS = ("math500", "minerva_math", "olympiadbench", "aime_like")


def _read(name: str, columns: tuple[str, ...]) -> pd.DataFrame:
    folder = PAPER_TABLES_DIR
    if not folder.is_dir():
        raise ReproError(f"paper tables folder {folder} is missing; it ships with the repository checkout")
    path = folder / name
    if not path.is_file():
        raise ReproError(f"paper table {path} is missing; restore it from the repository")
    frame = pd.read_csv(path)
    lacking = [c for c in columns if c not in frame.columns]
    if lacking:
        raise ReproError(f"paper table {path} lacks column(s) {', '.join(lacking)}")
    return frame


def table1() -> pd.DataFrame:
    """Table 1, Ave@32 in percent: one row per (backbone, prompt_set, method); GRPO rows are GRPO-n4."""
    return _read("table1_per_benchmark.csv", ("backbone", "prompt_set", "method", *BENCHMARKS, "weighted_average"))


def weighted_averages() -> pd.DataFrame:
    """Weighted Ave@32 for every method reported (adds GRPO-n8/n16, DAPO and Est on Qwen2.5-Math-1.5B)."""
    return _read("weighted_average_all_methods.csv", ("backbone", "prompt_set", "method", "weighted_average", "source"))


def step_times() -> pd.DataFrame:
    """Table 2: wall-clock seconds per training step on 8xH100, and the ratio to GRPO-n4."""
    return _read("step_time_8xh100.csv", ("backbone", "method", "seconds_per_step", "relative_to_grpo"))


def signal_loss() -> pd.DataFrame:
    """Figure 2's signal-loss statistics (pass@k of the base model, all-correct group share at step 400)."""
    return _read("signal_loss.csv", ("model", "statistic", "k", "value_percent", "note"))


def benchmark_sizes() -> dict[str, int]:
    """Problems per benchmark, the weights of the paper's weighted average (500/272/675/230)."""
    frame = _read("benchmarks.csv", ("benchmark", "problems", "contents"))
    return {str(b): int(p) for b, p in zip(frame["benchmark"], frame["problems"], strict=True)}
