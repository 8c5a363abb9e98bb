"""Paper-style tables from the tidy results (schema.py) beside the paper's numbers (paper.py).

Three builders return one DataFrame each, ready for any renderer:

- `weighted_average_table`: Table 1, Ave@k per benchmark and the weighted average, measured beside the
  paper, with the delta to the paper and the paired difference to the same backbone and prompt set's
  GRPO-n4, each with its 95% interval over seeds (`repro.report.stats`: Student t, because seeds are few).
- `step_time_table`: Table 2, seconds per training step and the cost relative to GRPO-n4.
- `sampling_table`: what the samplers did per step (responses, signal and zero-variance shares, Seq's
  unresolved prompts, additional samples).

Released checkpoints and base models evaluated by name (`repro eval NAME`, collected from their model run
folders) are rows of their own in the weighted-average table: method "seq-balance (released checkpoint)"
right after the trained "seq-balance" row of the same backbone and prompt set, with the paper columns of
the Table 1 row the checkpoint should reproduce; "base model" (prompt set "none") first in its backbone.

Accuracies and shares are percentages (x100, one decimal) so they sit beside the paper's. A cell
without a run is missing (NaN), never zero; every renderer prints it as "—" (LaTeX: "--"). Column
names say where a number comes from: "... measured" and "... paper". `missing_measured` lists the rows
a table holds without any measured number.

Intervals are two columns in the DataFrame, "<x> 95% low" and "<x> 95% high" (numbers, so the CSV keeps
them); the markdown, LaTeX and terminal renderers print the pair as one column "<x> 95% CI" reading
"[low, high]", and "—" where there is no interval (one seed, or one seed in common).
`weighted_by_seed` and `paired_difference` give the same numbers at full precision (for `repro report`).

Renderers: `to_markdown`, `to_latex` (booktabs, written by hand), `to_csv` and `to_rich`.

One module per table (`weighted_average`, `step_time`, `sampling`), on what they share (`common`: names,
display order, input checks), the per-seed values Table 1 and `repro report` read (`seeds`) and the renderers
(`render`); this package hands the names out, so callers import `repro.report.tables` alone.
"""

from __future__ import annotations

from repro.report.tables.common import (
    CI_HIGH,
    CI_LOW,
    GROUP_KEYS,
    MISSING,
    MISSING_LATEX,
    REFERENCE_METHOD,
    sorted_backbones,
    sorted_names,
)
from repro.report.tables.render import latex_escape, missing_measured, row_label, to_csv, to_latex, to_markdown, to_rich
from repro.report.tables.sampling import SAMPLING_COLUMNS, sampling_table
from repro.report.tables.seeds import gain_over_base, gain_values, paired_difference, paired_values, weighted_by_seed
from repro.report.tables.step_time import step_time_table
from repro.report.tables.weighted_average import weighted_average_table

__all__ = [
    "CI_HIGH",
    "CI_LOW",
    "GROUP_KEYS",
    "MISSING",
    "MISSING_LATEX",
    "REFERENCE_METHOD",
    "SAMPLING_COLUMNS",
    "gain_over_base",
    "gain_values",
    "latex_escape",
    "missing_measured",
    "paired_difference",
    "paired_values",
    "row_label",
    "sampling_table",
    "sorted_backbones",
    "sorted_names",
    "step_time_table",
    "to_csv",
    "to_latex",
    "to_markdown",
    "to_rich",
    "weighted_average_table",
    "weighted_by_seed",
]
