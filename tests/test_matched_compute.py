"""Accuracy at equal generated tokens: the bench's compute axis, from the tidy tables `repro collect` writes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from repro.report import matched
from repro.report.collect_training import _cumulative_tokens
from repro.report.schema import GENERATED_CUMULATIVE, HELDOUT, WEIGHTED_AVERAGE
from repro.sampling.metrics import GENERATED


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two methods x 3 seeds, checkpoints at steps 2 and 4: `cheap` generates 100 tokens a step, `dear` 300."""
    training, evals = [], []
    for method, per_step, acc in (("cheap", 100.0, {2: 0.10, 4: 0.20}), ("dear", 300.0, {2: 0.30, 4: 0.40})):
        for seed in range(3):
            run = f"tiny__{method}__standard__s{seed}"
            rows = [{"run": run, "step": s, GENERATED: per_step} for s in range(1, 5)]
            _cumulative_tokens(rows)
            keys = {"run": run, "backbone": "tiny", "method": method, "prompt_set": "standard", "seed": seed}
            training += [{**keys, **row} for row in rows]
            for step, value in acc.items():
                evals.append(
                    {**keys, "checkpoint_step": step, "benchmark": WEIGHTED_AVERAGE, "ave_at_k": value + 0.01 * seed}
                )
    return pd.DataFrame(evals), pd.DataFrame(training)


def test_collect_sums_generated_tokens_step_by_step() -> None:
    rows = [{"step": s, GENERATED: float(t)} for s, t in zip(range(1, 5), (5, 7, 11, 13), strict=True)]
    _cumulative_tokens(rows)
    assert [r[GENERATED_CUMULATIVE] for r in rows] == [5, 12, 23, 36]
    old = [{"step": 1}]  # a run made before tokens were logged keeps no such column
    _cumulative_tokens(old)
    assert GENERATED_CUMULATIVE not in old[0]


def test_each_method_is_read_within_the_smallest_methods_token_total() -> None:
    evals, training = _tables()
    points = matched.accuracy_by_tokens(evals, training)
    assert len(points) == 12 and set(points["tokens"]) == {200.0, 400.0, 600.0, 1200.0}
    table = matched.at_equal_tokens(points).set_index("method")
    # budget: cheap's total, 4 steps x 100 = 400 tokens; dear spent 1200
    assert (table["budget_tokens"] == 400.0).all() and table.loc["dear", "method_tokens"] == 1200.0
    # cheap is read at its step 4 (400 tokens), dear at none of its checkpoints (600 at step 2): over budget
    assert table.loc["cheap", "steps"] == "4" and table.loc["cheap", "seeds"] == 3
    assert table.loc["dear", "seeds"] == 0 and math.isnan(table.loc["dear", "ave"])
    values = np.array([20.0, 21.0, 22.0])  # percent, seeds 0..2
    half = 4.302652729911275 * values.std(ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert table.loc["cheap", "ave"] == pytest.approx(21.0)
    assert (table.loc["cheap", "low"], table.loc["cheap", "high"]) == pytest.approx((21.0 - half, 21.0 + half))
    lines = matched.section_lines(evals, training)
    assert lines[0] == "## Beyond the paper: accuracy at equal generated tokens"
    assert "  - dear: over budget (its first point needs more tokens)" in lines
    assert any(line.startswith("  - cheap: 21.0 [") and "over 3 of 3 seeds (step 4" in line for line in lines)


def test_runs_without_token_logs_give_no_section() -> None:
    evals, training = _tables()
    assert matched.section_lines(evals, training.drop(columns=[GENERATED, GENERATED_CUMULATIVE])) == []


def test_the_figure_draws_one_line_per_method_at_its_token_coordinates(tmp_path) -> None:
    from repro.report.figures.compute import accuracy_vs_tokens
    from repro.report.style import save

    evals, training = _tables()
    fig, missing = accuracy_vs_tokens(evals, training)
    assert missing == []
    (ax,) = [a for a in fig.axes if a.get_visible()]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert set(lines) == {"cheap (3 seeds)", "dear (3 seeds)"}
    assert list(lines["cheap (3 seeds)"].get_xdata()) == [200.0, 400.0]
    assert list(lines["dear (3 seeds)"].get_ydata()) == pytest.approx([31.0, 41.0])
    paths = save(fig, tmp_path / "accuracy-tokens")
    assert all(p.stat().st_size > 1000 for p in paths)


def test_the_smallest_method_is_read_at_every_seeds_final_checkpoint_when_its_seeds_differ() -> None:
    evals, training = _tables()
    # cheap's seed 2 generated 10% more each step: 440 tokens in all, the others 400
    seed2 = (training["method"] == "cheap") & (training["seed"] == 2)
    training.loc[seed2, GENERATED] = 110.0
    training.loc[seed2, GENERATED_CUMULATIVE] = [110.0, 220.0, 330.0, 440.0]
    table = matched.at_equal_tokens(matched.accuracy_by_tokens(evals, training)).set_index("method")
    assert table.loc["cheap", "budget_tokens"] == 440.0  # the most any of its seeds generated
    assert table.loc["cheap", "seeds"] == 3 and table.loc["cheap", "steps"] == "4"  # every seed at its final step


def _heldout_training() -> pd.DataFrame:
    """`cheap` (100 tokens a step) and `dear` (300) x 3 seeds, 6 steps, held-out accuracy logged every 2 steps:
    cheap's is 10 x step + seed, dear's 5 x step + seed (percent)."""
    rows = []
    for method, per_step, slope in (("cheap", 100.0, 10.0), ("dear", 300.0, 5.0)):
        for seed in range(3):
            run = f"tiny__{method}__standard__s{seed}"
            steps = [{"run": run, "step": s, GENERATED: per_step} for s in range(1, 7)]
            _cumulative_tokens(steps)
            keys = {"backbone": "tiny", "method": method, "prompt_set": "standard", "seed": seed}
            for row in steps:
                heldout = (slope * row["step"] + seed) / 100.0 if row["step"] % 2 == 0 else math.nan
                rows.append({**keys, **row, HELDOUT: heldout})
    return pd.DataFrame(rows)


def test_the_curve_is_the_held_out_accuracy_where_runs_logged_it_else_the_evaluated_checkpoints() -> None:
    from repro.local.heldout import ACCURACY

    assert HELDOUT == ACCURACY  # the report reads the column the CPU trainer writes
    training = _heldout_training()
    points, what = matched.curve(pd.DataFrame(), training)
    assert what == matched.HELDOUT_WHAT and len(points) == 2 * 3 * 3  # steps 2, 4, 6 of 6 runs
    cheap0 = points[points["run"] == "tiny__cheap__standard__s0"]
    assert cheap0["tokens"].tolist() == [200.0, 400.0, 600.0] and cheap0["ave"].tolist() == pytest.approx([20, 40, 60])
    evals, old = _tables()
    points, what = matched.curve(evals, old)  # no held-out column: the evaluated checkpoints
    assert what == matched.CHECKPOINT_WHAT and len(points) == 12


def test_two_methods_are_paired_seed_by_seed_at_the_smaller_runs_token_total() -> None:
    points, _ = matched.curve(pd.DataFrame(), _heldout_training())
    diffs, reads = matched.paired_at_equal_tokens(points, "tiny", "standard", "dear", "cheap")
    # budget per seed: cheap's 600 tokens; dear's last point within it is step 2 (600 tokens), cheap's step 6
    assert [r["budget"] for r in reads] == [600.0] * 3
    assert [(r["step"], r["reference_step"]) for r in reads] == [(2, 6)] * 3
    assert diffs == pytest.approx([(10 + s) - (60 + s) for s in range(3)])  # -50 points each seed
    # the other way round the budget is the same and the signs flip
    back, _ = matched.paired_at_equal_tokens(points, "tiny", "standard", "cheap", "dear")
    assert back == pytest.approx([50.0] * 3)
    # a seed one method did not run is left out
    fewer = points[~((points["method"] == "dear") & (points["seed"] == 2))]
    assert len(matched.paired_at_equal_tokens(fewer, "tiny", "standard", "dear", "cheap")[0]) == 2
