"""The pass@k family (figure 4): pass@k of each run's final checkpoint against k, from the eval table's
summaries or, where the run folders are at hand, recomputed from the eval records at every power of two."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from repro.evaluation.metrics import pass_at_k_array
from repro.report.figures.common import (
    Expected,
    Result,
    backbone_order,
    empty_figure,
    method_lines,
    panels,
    prologue,
    prompt_sets,
)
from repro.report.figures.records import problem_counts, run_records
from repro.report.schema import RUN_KEYS, WEIGHTED_AVERAGE
from repro.report.style import plot_style

__all__ = ["passk"]

_PASS_RE = re.compile(r"pass@(\d+)$")


def _pass_columns(frame: pd.DataFrame) -> dict[int, str]:
    out = {}
    for c in frame.columns:
        match = _PASS_RE.match(str(c))
        if match:
            out[int(match.group(1))] = str(c)
    return dict(sorted(out.items()))


def _records_passk(records: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """pass@k at k = 1, 2, 4, ... up to the samples per problem, pooled over every problem of the records."""
    n, c = problem_counts(records)
    if n.size == 0:
        return {}
    top = int(n.min())
    ks = [2**i for i in range(int(math.log2(top)) + 1)]
    if ks[-1] != top:
        ks.append(top)
    return {k: float(np.mean(pass_at_k_array(n, c, k))) for k in ks}


def _final_rows(eval_df: pd.DataFrame) -> pd.DataFrame:
    steps = pd.to_numeric(eval_df["checkpoint_step"], errors="coerce")
    frame = eval_df.assign(checkpoint_step=steps)
    last = frame.groupby("run")["checkpoint_step"].transform("max")
    return frame[frame["checkpoint_step"] == last]


def passk(eval_df: pd.DataFrame, runs_root: Path | str | None = None, expected: Expected | None = None) -> Result:
    """Figure 4: pass@k (percent) of each run's final checkpoint against k on a log2 axis.

    Uses the benchmark-weighted rows (WEIGHTED_AVERAGE) when there are any, one panel per backbone;
    otherwise one panel per backbone x benchmark. With `runs_root`, a run whose eval records are found
    (<runs_root>/<run>/eval/global_step_<step>/<benchmark>.jsonl) gets pass@k at every power of two up to
    its samples per problem, recomputed from the records (pooled over benchmarks = problem-weighted),
    instead of only the ks its summary asked for. One line per method x prompt set, seeds averaged.
    """
    _, missing = prologue(
        eval_df, expected, table="eval", columns=("checkpoint_step", "benchmark"), what="evaluated runs"
    )
    title = "pass@k of the final checkpoints"
    if eval_df.empty:
        return empty_figure(title, "no evaluations"), ["no evaluations", *missing]
    final = _final_rows(eval_df)
    weighted = (final["benchmark"] == WEIGHTED_AVERAGE).any()
    if weighted:
        lacking = sorted(set(final["run"]) - set(final.loc[final["benchmark"] == WEIGHTED_AVERAGE, "run"]))
        missing += [f"run {r}: no {WEIGHTED_AVERAGE} row at its final checkpoint" for r in lacking]
        final = final[final["benchmark"] == WEIGHTED_AVERAGE]
    cols = _pass_columns(final)
    long = []
    for row in final.to_dict("records"):
        values = {k: row[c] for k, c in cols.items() if pd.notna(row.get(c))}
        if runs_root is not None:
            records = run_records(Path(runs_root) / str(row["run"]), int(row["checkpoint_step"]))
            every = [r for rs in records.values() for r in rs]
            pooled = every if weighted else records.get(str(row["benchmark"]), [])
            if pooled:
                values = _records_passk(pooled)
        if not values:
            missing.append(f"run {row['run']} {row['benchmark']}: no pass@k values")
        for k, v in values.items():
            long.append({**{key: row[key] for key in RUN_KEYS}, "benchmark": row["benchmark"], "k": k, "value": v})
    if not long:
        return empty_figure(title, "no pass@k columns"), missing
    with plot_style():
        data = pd.DataFrame(long)
        data["value"] = pd.to_numeric(data["value"], errors="coerce") * 100.0
        means = data.groupby(["backbone", "benchmark", "method", "prompt_set", "k"], as_index=False)["value"].mean()
        panel_keys = [
            (b, bench)
            for b in backbone_order(means["backbone"])
            for bench in sorted(set(means.loc[means["backbone"] == b, "benchmark"]))
        ]
        sets = prompt_sets(means)
        fig, axes = panels(len(panel_keys))
        for ax, (backbone, bench) in zip(axes, panel_keys, strict=True):
            part = means[(means["backbone"] == backbone) & (means["benchmark"] == bench)]
            for line, style in method_lines(part, sets[backbone], "k"):
                ax.plot(line["k"].to_numpy(), line["value"].to_numpy(), marker="o", markersize=3, **style)
            ks = sorted(set(part["k"]))
            ax.set_xscale("log", base=2)
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.set_title(backbone if bench == WEIGHTED_AVERAGE else f"{backbone}: {bench}")
            ax.set_xlabel("k (samples per problem)")
            ax.set_ylabel("pass@k (%)" + (", weighted over benchmarks" if bench == WEIGHTED_AVERAGE else ""))
            ax.legend(loc="lower right")
        fig.suptitle(title + (" (problem-weighted average over benchmarks)" if weighted else ""))
    return fig, missing
