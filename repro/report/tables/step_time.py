"""Table 2: seconds per training step and the cost relative to the reference method, beside the paper's."""

from __future__ import annotations

import pandas as pd

from repro import paper
from repro.report.tables.common import _DECIMALS, _MEASURED, REFERENCE_METHOD, STEP_TIMING, _measured_steps, _sort


def step_time_table(
    training_df: pd.DataFrame | None, prompt_set: str | None = None, *, measured_only: bool = False
) -> pd.DataFrame:
    """Table 2: seconds per training step per (backbone, method), beside the paper's 8xH100 seconds.

    "seconds measured" is the mean of `timing_s/step` over each run's steps except step 1 (start-up),
    then over the runs (`n_runs`, every prompt set unless `prompt_set` is given); "relative measured"
    divides by the same backbone's GRPO-n4. The paper's columns come from paper_tables/step_time_8xh100.csv.
    """
    keys = ["backbone", "method"]
    frame = _measured_steps(training_df, prompt_set)
    seen = frame[keys].drop_duplicates()
    if STEP_TIMING in frame.columns:
        timed = frame.assign(**{STEP_TIMING: pd.to_numeric(frame[STEP_TIMING], errors="coerce")})
        timed = timed[(pd.to_numeric(timed["step"], errors="coerce") != 1) & timed[STEP_TIMING].notna()]
        per_run = timed.groupby([*keys, "run"])[STEP_TIMING].mean()
    else:
        per_run = pd.Series(dtype=float, index=pd.MultiIndex.from_tuples([], names=[*keys, "run"]))
    grouped = per_run.groupby(level=keys)
    measured = pd.concat([grouped.size().rename("n_runs"), grouped.mean().rename("seconds measured")], axis=1)
    measured = seen.merge(measured.reset_index(), on=keys, how="left") if not seen.empty else measured.reset_index()

    reported = paper.step_times()[[*keys, "seconds_per_step", "relative_to_grpo"]]
    reported = reported.rename(columns={"seconds_per_step": "seconds paper", "relative_to_grpo": "relative paper"})
    if measured_only:
        reported = reported.merge(measured[keys], on=keys, how="inner")
    table = reported.merge(measured, on=keys, how="outer")
    table["n_runs"] = pd.array(table["n_runs"], dtype="Int64")
    for column in ("seconds measured", "seconds paper", "relative paper"):
        table[column] = table[column].astype(float)
    reference = dict(
        zip(
            table["backbone"][table["method"] == REFERENCE_METHOD],
            table["seconds measured"][table["method"] == REFERENCE_METHOD],
            strict=True,
        )
    )
    ratio = table["seconds measured"] / table["backbone"].map(reference).astype(float)
    table["relative measured"] = ratio.round(2)
    table["seconds measured"] = table["seconds measured"].round(2)
    table = table[[*keys, "n_runs", "seconds measured", "seconds paper", "relative measured", "relative paper"]]
    table = _sort(table, keys)
    table.attrs[_DECIMALS] = {"seconds measured": 2, "seconds paper": 0, "relative measured": 2, "relative paper": 2}
    table.attrs[_MEASURED] = ["seconds measured", "relative measured"]
    return table
