"""The paper's figures under their historical names: a facade over the package `repro.report.figures`,
which holds one module per figure family (training curves, Ave@k over checkpoints, step time, sampling,
pass@k, signal loss) and the conventions all figures share. Commands and tests keep importing
`repro.report.plots`; new code may import the family module directly. A family whose every public name is
re-exported is star-imported, so its `__all__` is the one list of those names."""

from __future__ import annotations

from repro.report.figures import passk as _passk
from repro.report.figures import sampling as _sampling
from repro.report.figures import signal_loss as _signal_loss
from repro.report.figures import step_time as _step_time
from repro.report.figures import training as _training
from repro.report.figures.common import Expected, Result, moving_average
from repro.report.figures.eval_curve import eval_curve
from repro.report.figures.passk import *  # noqa: F403
from repro.report.figures.records import CORRECT_THRESHOLD
from repro.report.figures.sampling import *  # noqa: F403
from repro.report.figures.signal_loss import *  # noqa: F403
from repro.report.figures.step_time import *  # noqa: F403
from repro.report.figures.training import *  # noqa: F403

__all__ = [
    "CORRECT_THRESHOLD",
    "Expected",
    "Result",
    "eval_curve",
    "moving_average",
    *_passk.__all__,
    *_sampling.__all__,
    *_signal_loss.__all__,
    *_step_time.__all__,
    *_training.__all__,
]
