"""The sampling table: what the samplers did per step in the measured runs."""

from __future__ import annotations

import math

import pandas as pd

from repro.report.tables.common import _DECIMALS, _MEASURED, GROUP_KEYS, _measured_steps, _sort

# column -> (decimals, x100)
SAMPLING_COLUMNS: dict[str, tuple[int, bool]] = {
    "responses per step": (1, False),
    "responses per prompt": (2, False),
    "signal share %": (1, True),
    "zero-variance share %": (1, True),
    "unresolved share %": (1, True),
    "additional samples per step": (1, False),
    "update responses per step": (1, False),
}


def _sampler_values(frame: pd.DataFrame) -> pd.DataFrame:
    """Per logged step, the sampling table's quantities (NaN where the run did not log them)."""

    def col(name: str) -> pd.Series:
        if name not in frame.columns:
            return pd.Series(math.nan, index=frame.index, dtype=float)
        return pd.to_numeric(frame[name], errors="coerce").astype(float)

    prompts = col("sampler/prompts").where(lambda s: s > 0)
    per_prompt = col("sampler/responses_per_prompt").combine_first(col("sampler/responses_total") / prompts)
    return pd.DataFrame(
        {
            "responses per step": col("sampler/responses_total"),
            "responses per prompt": per_prompt,
            "signal share %": col("sampler/signal_frac"),
            "zero-variance share %": col("sampler/zero_variance_frac"),
            "unresolved share %": col("sampler/unresolved") / prompts,
            "additional samples per step": col("sampler/additional_samples"),
            "update responses per step": col("sampler/update_size"),
        },
        index=frame.index,
    )


def sampling_table(training_df: pd.DataFrame | None, prompt_set: str | None = None) -> pd.DataFrame:
    """Sampling per (backbone, prompt_set, method), means over each run's steps, then over its seeds.

    Responses drawn per step and per prompt, the share of update groups with signal (both correct and
    wrong responses) and with zero variance, Seq's share of prompts left unresolved after all rounds
    (`sampler/unresolved` / `sampler/prompts`; missing for other methods), and the samples drawn beyond
    each prompt's first request, and the responses the policy update trains on (`sampler/update_size`:
    what a step costs the update, as against what it costs to generate). Shares are percentages. Only
    measured runs have rows.
    """
    keys = list(GROUP_KEYS)
    frame = _measured_steps(training_df, prompt_set)
    values = pd.concat([frame[[*keys, "run"]], _sampler_values(frame)], axis=1)
    columns = list(SAMPLING_COLUMNS)
    per_run = values.groupby([*keys, "run"], sort=False)[columns].mean()
    grouped = per_run.groupby(level=keys, sort=False)
    table = pd.concat([grouped.size().rename("n_seeds"), grouped.mean()], axis=1).reset_index()
    table["n_seeds"] = pd.array(table["n_seeds"], dtype="Int64")
    for column, (decimals, percent) in SAMPLING_COLUMNS.items():
        values = table[column].astype(float) * (100 if percent else 1)
        table[column] = values.round(decimals)
    table = _sort(table[[*keys, "n_seeds", *columns]], keys)
    table.attrs[_DECIMALS] = {c: d for c, (d, _) in SAMPLING_COLUMNS.items()}
    table.attrs[_MEASURED] = columns
    return table
