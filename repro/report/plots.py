"""The paper's figures under their historical names: a facade over the package `repro.report.figures`,
which holds one module per figure family (training curves, Ave@k over checkpoints, step time, sampling,
pass@k, signal loss) and the conventions all figures share. Commands and tests keep importing
`repro.report.plots`; new code may import the family module directly."""

from __future__ import annotations

from repro.report.figures.common import Expected, Result, moving_average
from repro.report.figures.eval_curve import eval_curve
from repro.report.figures.passk import passk
from repro.report.figures.records import CORRECT_THRESHOLD
from repro.report.figures.sampling import (
    ADDITIONAL,
    MISSING_NEG,
    MISSING_POS,
    RESOLVED_2,
    SAMPLING_PANELS,
    sampling,
    seed_mean,
)
from repro.report.figures.signal_loss import share_all_correct, signal_loss
from repro.report.figures.step_time import MEASURED_LABEL, PAPER_LABEL, STEP_TIME, step_time
from repro.report.figures.training import (
    BAND_ALPHA,
    BAND_LABEL,
    BAND_LEGEND,
    DEFAULT_REWARD,
    ENTROPY,
    FIRST_REWARD,
    HELDOUT,
    HELDOUT_N,
    LEGEND_INSIDE_MAX,
    LEGEND_WIDTH_IN,
    POOL_REWARD,
    REWARD,
    REWARD_SOURCES,
    REWARD_VALUE,
    heldout_curve,
    reward_column,
    reward_curve,
    reward_entropy,
    seed_bands,
)

__all__ = [
    "ADDITIONAL",
    "BAND_ALPHA",
    "BAND_LABEL",
    "BAND_LEGEND",
    "CORRECT_THRESHOLD",
    "DEFAULT_REWARD",
    "ENTROPY",
    "FIRST_REWARD",
    "HELDOUT",
    "HELDOUT_N",
    "LEGEND_INSIDE_MAX",
    "LEGEND_WIDTH_IN",
    "MEASURED_LABEL",
    "MISSING_NEG",
    "MISSING_POS",
    "PAPER_LABEL",
    "POOL_REWARD",
    "RESOLVED_2",
    "REWARD",
    "REWARD_SOURCES",
    "REWARD_VALUE",
    "SAMPLING_PANELS",
    "STEP_TIME",
    "Expected",
    "Result",
    "eval_curve",
    "heldout_curve",
    "moving_average",
    "passk",
    "reward_column",
    "reward_curve",
    "reward_entropy",
    "sampling",
    "seed_bands",
    "seed_mean",
    "share_all_correct",
    "signal_loss",
    "step_time",
]
