"""REPORT's "other adaptive samplers" section: each literature method judged against its own paper's claim,
per step and at equal generated tokens, from tables built here with known differences."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from repro.report import bench
from repro.report.report import AGREES, CANNOT_TELL, DISAGREES

T_2 = 4.302652729911275  # t_{0.975, 2}


def _by_seed(weighted: dict[str, list[float]]) -> pd.DataFrame:
    rows = [
        {
            "backbone": "tiny-arith",
            "prompt_set": "standard",
            "method": m,
            "seed": s,
            "weighted": w,
            "trained": True,
            "benchmarks": "a,b",
        }
        for m, values in weighted.items()
        for s, w in enumerate(values)
    ]
    return pd.DataFrame(rows)


def _points(curves: dict[str, tuple[float, list[float]]]) -> pd.DataFrame:
    """method -> (tokens per step, accuracy at steps 10, 20, ..., 100 for seed 0; seed s adds 0.1 x s)."""
    rows = []
    for method, (per_step, accuracy) in curves.items():
        for seed in range(3):
            for i, ave in enumerate(accuracy):
                step = 10 * (i + 1)
                rows.append(
                    {
                        "run": f"r-{method}-{seed}",
                        "backbone": "tiny-arith",
                        "prompt_set": "standard",
                        "method": method,
                        "seed": seed,
                        "step": step,
                        "tokens": per_step * step,
                        "ave": ave + 0.1 * seed,
                    }
                )
    return pd.DataFrame(rows)


BY_SEED = _by_seed(
    {
        "grpo-n4": [10.0, 11.0, 12.0],
        "pods-16-4": [12.0, 13.5, 14.0],  # +2.0, +2.5, +2.0: better per step
        "grpo-n8": [12.0, 12.0, 13.0],
        "knapsack": [10.0, 10.5, 11.5],  # -2.0, -1.5, -1.5: worse, against its paper's +2 to +4
        "dapo": [12.0, 12.0, 12.0],
        "greso": [11.9, 11.8, 12.0],  # -0.1, -0.2, 0.0: a loss well under the 1-point margin
    }
)
LINEAR = [float(v) for v in range(1, 11)]  # accuracy = step / 10
POINTS = _points(
    {
        "grpo-n4": (100.0, LINEAR),
        "pods-16-4": (400.0, LINEAR),  # 4x the tokens a step
        "grpo-n8": (200.0, LINEAR),
        "knapsack": (200.0, LINEAR),
        "dapo": (400.0, LINEAR),
        "greso": (200.0, LINEAR),  # half DAPO's tokens, the same curve per step
    }
)


def _claim(method: str) -> bench.BenchClaim:
    return next(c for c in bench.CLAIMS if c.method == method)


def test_pods_is_judged_per_step_and_only_measured_per_token() -> None:
    lines, outcome = bench.claim_lines(BY_SEED, POINTS, "tiny-arith", _claim("pods-16-4"))
    assert outcome == {"step": AGREES, "token": None}
    d = [2.0, 2.5, 2.0]
    half = T_2 * pd.Series(d).std() / math.sqrt(3)
    assert f"+2.2 points, 95% CI [{2.1667 - half:.1f}, {2.1667 + half:.1f}] over 3 seeds" in lines[1]
    # per seed the budget is GRPO-n4's 10,000 tokens: PODS at step 20 (8,000; 30 would be 12,000) vs n4 at 100
    assert "seed 0: 10k tokens, step 20 vs 100" in lines[2]
    assert "-8.0 points, 95% CI [-8.0, -8.0] over 3 seeds" in lines[2] and "no claim to judge" in lines[2]


def test_knapsack_measured_below_grpo_disagrees_with_its_paper() -> None:
    lines, outcome = bench.claim_lines(BY_SEED, POINTS, "tiny-arith", _claim("knapsack"))
    assert outcome["step"] == DISAGREES
    assert outcome["token"] == CANNOT_TELL  # same curve, same tokens: a difference of exactly 0 every seed
    assert "step 100 vs 100" in lines[2]


def test_greso_no_loss_per_step_and_ahead_per_token() -> None:
    lines, outcome = bench.claim_lines(BY_SEED, POINTS, "tiny-arith", _claim("greso"))
    assert outcome == {"step": AGREES, "token": AGREES}
    assert 'against "no loss"' in lines[1]
    # budget: GRESO's 20,000 tokens; DAPO read at step 50 (accuracy 5) against GRESO's step 100 (10): +5
    assert "step 100 vs 50" in lines[2] and "+5.0 points" in lines[2]


def test_a_per_step_loss_beyond_the_margin_is_not_no_loss() -> None:
    worse = _by_seed({"dapo": [12.0, 12.0, 12.0], "greso": [10.0, 9.5, 10.5]})
    _, outcome = bench.claim_lines(worse, POINTS, "tiny-arith", _claim("greso"))
    assert outcome["step"] == DISAGREES  # the whole interval below 0


def test_the_section_lists_only_the_bench_methods_that_were_trained() -> None:
    evals = pd.DataFrame(columns=["run", "checkpoint_step", "benchmark", "ave_at_k"])
    only_greso = BY_SEED[BY_SEED["method"].isin(["dapo", "greso", "grpo-n4"])]
    lines = bench.section_lines(only_greso, evals, None)
    assert lines[0] == "## Beyond the paper: other adaptive samplers"
    assert sum(line.startswith("- **") for line in lines) == 1 and "**greso vs dapo**" in "\n".join(lines)
    assert bench.section_lines(BY_SEED[BY_SEED["method"] == "grpo-n4"], evals, None) == []


@pytest.mark.parametrize("claim", bench.CLAIMS, ids=lambda c: c.method)
def test_every_claim_names_methods_the_catalog_knows(claim) -> None:
    from repro import catalog

    for name in (claim.method, claim.reference):
        assert catalog.get_method(name).key == name
    assert catalog.get_method(claim.method).literature  # a bench method, not one of the paper's
