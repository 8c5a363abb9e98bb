"""`repro report`: sentences and verdicts from hand-made numbers, and the REPORT.md file."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from repro import cli
from repro.report import report, stats, tables
from repro.report.schema import WEIGHTED_AVERAGE

TINY = "tiny-arith"
Q15 = "qwen2.5-math-1.5b"
SIZES = {"tiny-math500": 100, "tiny-aime": 46}

# weighted Ave@k per seed (fractions); every benchmark of a run equals its weighted average
TINY_SEEDS = {
    "grpo-n4": (0.40, 0.42, 0.44),
    "seq-balance": (0.43, 0.46, 0.46),  # - grpo-n4: d = [3, 4, 2] -> +3.0, [0.5, 5.5]
    "grpo-n16": (0.47, 0.49, 0.48),  # seq-balance - this: d = [-4, -3, -2] -> -3.0, [-5.5, -0.5]
    "seq-pos": (0.42, 0.47, 0.46),  # - seq-balance: d = [-1, 1, 0] -> 0.0, [-2.5, 2.5]
    "est": (0.45,),  # seed 0 only: - grpo-n4 = +5.0 on one seed, no interval
}


def _rows(backbone: str, method: str, seed: int, value: float, prompt_set: str = "standard") -> list[dict]:
    run = f"{backbone}__{method}__{prompt_set}__s{seed}"
    keys = {"run": run, "backbone": backbone, "method": method, "prompt_set": prompt_set, "seed": seed}
    rows = [
        {**keys, "checkpoint_step": 10, "benchmark": b, "problems": n, "k": 4, "ave_at_k": value}
        for b, n in SIZES.items()
    ]
    total = sum(SIZES.values())
    return [
        *rows,
        {**keys, "checkpoint_step": 10, "benchmark": WEIGHTED_AVERAGE, "problems": total, "k": 4, "ave_at_k": value},
    ]


@pytest.fixture
def eval_df() -> pd.DataFrame:
    rows = []
    for method, values in TINY_SEEDS.items():
        for seed, value in enumerate(values):
            rows += _rows(TINY, method, seed, value)
    return pd.DataFrame(rows)


def _steps(method: str, responses: float, update: float, seconds: float) -> list[dict]:
    keys = {"run": f"{TINY}__{method}__standard__s0", "backbone": TINY, "method": method, "prompt_set": "standard"}
    metric = {"sampler/prompts": 8.0, "sampler/responses_total": responses, "sampler/update_size": update}
    # step 1 is start-up (left out of the step time)
    return [{**keys, "seed": 0, "step": s, "timing_s/step": 99.0 if s == 1 else seconds, **metric} for s in (1, 2, 3)]


@pytest.fixture
def training_df() -> pd.DataFrame:
    return pd.DataFrame([*_steps("seq-balance", 96.0, 32.0, 2.0), *_steps("grpo-n16", 128.0, 128.0, 4.0)])


def _sentences(eval_df: pd.DataFrame, training_df: pd.DataFrame | None = None) -> dict[str, tuple[str, str]]:
    by_seed = tables.weighted_by_seed(eval_df)
    sampling = tables.sampling_table(training_df) if training_df is not None else None
    out = {}
    for comparison in report.COMPARISONS:
        step_time = tables.step_time_table(training_df, comparison.prompt_set) if training_df is not None else None
        out[comparison.title] = report.comparison_sentence(by_seed, TINY, comparison, sampling, step_time)
    return out


# ------------------------------------------------------------------------------------------ verdicts


@pytest.mark.parametrize(
    ("low", "high", "paper", "expected"),
    [
        (0.5, 5.5, 2.3, report.AGREES),
        (-5.5, -0.5, -1.5, report.AGREES),
        (-5.5, -0.5, 0.3, report.DISAGREES),
        (0.5, 5.5, -1.5, report.DISAGREES),
        (-2.5, 2.5, 2.3, report.CANNOT_TELL),
        (0.0, 2.0, 2.3, report.CANNOT_TELL),  # an endpoint at exactly 0 contains 0
        (0.5, 5.5, None, report.CANNOT_TELL),  # the paper reports no such pair
        (0.5, 5.5, 0.0, report.CANNOT_TELL),  # the paper's difference has no sign
        (math.nan, math.nan, 2.3, report.CANNOT_TELL),  # one seed: no interval
    ],
)
def test_verdict_rule(low: float, high: float, paper: float | None, expected: str) -> None:
    mean = 3.0 if math.isnan(low) else (low + high) / 2
    assert report.verdict(stats.Interval(mean, low, high, 3), paper) == expected


def test_paper_difference_uses_the_backbone_or_the_stand_in() -> None:
    seq_vs_n4 = report.COMPARISONS[0]
    assert report.paper_difference(TINY, seq_vs_n4) == (2.3, 47.6, 45.3, Q15)  # 47.6 - 45.3, Table 1
    assert report.paper_difference("qwen2.5-math-7b", seq_vs_n4) == (1.3, 54.6, 53.3, "qwen2.5-math-7b")
    # GRPO-n16 only on Qwen2.5-Math-1.5B (weighted averages of every method): 47.6 - 47.3
    assert report.paper_difference(TINY, report.COMPARISONS[1])[:3] == (0.3, 47.6, 47.3)
    assert report.paper_difference("qwen2.5-math-7b", report.COMPARISONS[1])[0] is None
    assert report.paper_difference(TINY, report.COMPARISONS[4])[:3] == (3.6, 45.5, 41.9)  # hard set


# ------------------------------------------------------------------------------------------ sentences


def test_sentences_from_hand_made_numbers(eval_df, training_df) -> None:
    said = _sentences(eval_df, training_df)
    miniature = f"{Q15}, standard; {TINY} is a miniature, so compared against the paper's {Q15} rows"

    sentence, outcome = said["Seq-balance vs GRPO-n4"]
    assert outcome == report.AGREES
    assert sentence == (
        f"**Seq-balance vs GRPO-n4** ({TINY}, standard): measured paired difference +3.0 points, 95% CI "
        f"[0.5, 5.5] over 3 seeds; the paper reports +2.3 points (47.6 vs 45.3, {miniature}). Verdict: **agrees**. "
        "Stability: **fragile**: the mean keeps its sign with any one of the 3 seeds left out; 3 fresh seeds would "
        "repeat this verdict with probability 0.75 if the measured mean and spread (s = 1.0 points between seeds) "
        "were the truth."
    )

    sentence, outcome = said["Seq-balance vs GRPO-n16"]
    assert outcome == report.DISAGREES
    assert "measured paired difference -3.0 points, 95% CI [-5.5, -0.5] over 3 seeds" in sentence
    assert "the paper reports +0.3 points (47.6 vs 47.3" in sentence
    # the cost: update 32 vs 128, drawn 96 vs 128, seconds (steps 2-3) 2.0 vs 4.0
    assert sentence.endswith(
        "Cost: Seq-balance used 0.25x GRPO-n16's responses in the update per step (32.0 vs 128.0); 0.75x "
        "GRPO-n16's responses drawn per step (96.0 vs 128.0); 0.50x its seconds per step (2.00 s vs 4.00 s)."
    )

    sentence, outcome = said["Seq-pos vs Seq-balance"]
    assert outcome == report.CANNOT_TELL
    assert "measured paired difference 0.0 points, 95% CI [-2.5, 2.5] over 3 seeds" in sentence
    assert "the paper reports -1.5 points (46.1 vs 47.6" in sentence

    sentence, outcome = said["Est vs GRPO-n4"]
    assert outcome == report.CANNOT_TELL
    assert "measured difference +5.0 points on 1 seed (one seed: no interval)" in sentence
    assert "95% CI" not in sentence and "the paper reports +1.2 points (46.5 vs 45.3" in sentence

    sentence, outcome = said["Seq-balance vs GRPO-n4 on the hard prompt set"]
    assert outcome == report.CANNOT_TELL
    assert f"not measured (no trained run of {TINY}/hard/seq-balance and {TINY}/hard/grpo-n4)" in sentence
    assert "the paper reports +3.6 points (45.5 vs 41.9" in sentence


def test_a_paper_backbone_is_compared_with_itself_and_missing_costs_are_said() -> None:
    rows = []
    for seed, (grpo, seq) in enumerate(((0.44, 0.46), (0.46, 0.47))):
        rows += _rows(Q15, "grpo-n4", seed, grpo) + _rows(Q15, "seq-balance", seed, seq)
    by_seed = tables.weighted_by_seed(pd.DataFrame(rows))
    sentence, outcome = report.comparison_sentence(by_seed, Q15, report.COMPARISONS[0])
    # d = [2, 1]: mean 1.5, s = sqrt(0.5), half width 12.706204736 * sqrt(0.5) / sqrt(2) = 6.353 -> [-4.9, 7.9]
    assert "measured paired difference +1.5 points, 95% CI [-4.9, 7.9] over 2 seeds" in sentence
    assert f"(47.6 vs 45.3, {Q15}, standard)." in sentence and "miniature" not in sentence
    assert outcome == report.CANNOT_TELL
    sentence, _ = report.comparison_sentence(by_seed, Q15, report.COMPARISONS[1])
    assert sentence.endswith(f"Cost: no sampler metrics or step times measured for Seq-balance and GRPO-n16 on {Q15}.")


def test_no_common_seed_is_not_a_difference() -> None:
    rows = _rows(TINY, "grpo-n4", 0, 0.40) + _rows(TINY, "seq-balance", 1, 0.45)
    by_seed = tables.weighted_by_seed(pd.DataFrame(rows))
    sentence, outcome = report.comparison_sentence(by_seed, TINY, report.COMPARISONS[0])
    assert "no seed measured by both runs on the same benchmarks, so no paired difference" in sentence
    assert outcome == report.CANNOT_TELL


# ------------------------------------------------------------------------------------------ the file


def _results(folder: Path, eval_df: pd.DataFrame, training_df: pd.DataFrame | None) -> Path:
    folder.mkdir(parents=True)
    eval_df.to_parquet(folder / "eval.parquet")
    if training_df is not None:
        training_df.to_parquet(folder / "training.parquet")
    (folder / "figures").mkdir()
    (folder / "figures" / "reward-curve.png").write_bytes(b"\x89PNG")
    (folder / "figures" / "reward-curve.pdf").write_bytes(b"%PDF")
    (folder / "figures" / "sampling.pdf").write_bytes(b"%PDF")  # a PDF alone is not embedded
    return folder


def _base_rows(value: float) -> list[dict]:
    """The base model as `repro collect` records it: method "base model", prompt set "none", origin base."""
    from repro.report.schema import BASE_MODEL_LABEL, NO_PROMPT_SET

    rows = _rows(TINY, BASE_MODEL_LABEL, 0, value, prompt_set=NO_PROMPT_SET)
    return [{**r, "run": TINY, "origin": "base", "model": TINY} for r in rows]


def test_gain_over_the_base_model_by_hand(eval_df) -> None:
    """g_s = x_s - base: seq-balance [43, 46, 46] - 40 = [3, 6, 6] -> mean 5, s = sqrt(3), t_{0.975,2} = 4.3027:
    half width 4.3027 * sqrt(3)/sqrt(3) = 4.3027 -> [0.70, 9.30]; GRPO-n4 [40, 42, 44] - 40 = [0, 2, 4] -> 2,
    s = 2, half 4.3027 * 2/sqrt(3) = 4.968 -> [-2.97, 6.97]; Est one seed: +5, no interval."""
    frame = pd.DataFrame([*eval_df.to_dict("records"), *_base_rows(0.40)])
    frame["origin"] = frame["origin"].fillna("run")
    by_seed = tables.weighted_by_seed(frame)
    gain, base = tables.gain_over_base(by_seed, TINY, "standard", "seq-balance")
    assert base == pytest.approx(40.0)
    assert (gain.mean, gain.low, gain.high, gain.n) == pytest.approx((5.0, 5.0 - 4.3027, 5.0 + 4.3027, 3), abs=1e-3)
    sentence, outcome = report.base_gain_sentence(by_seed, TINY, "standard", "seq-balance")
    assert outcome == report.IMPROVES
    assert sentence == (
        f"**Seq-balance vs the base model** ({TINY}, standard): 40.0 -> 45.0, +5.0 points, 95% CI [0.7, 9.3] "
        "over 3 seeds. Verdict: **improves**. Stability: **fragile**: the mean keeps its sign with any one of the 3 "
        "seeds left out; 3 fresh seeds would repeat this verdict with probability 0.72 if the measured mean and "
        "spread (s = 1.7 points between seeds) were the truth."
    )
    sentence, outcome = report.base_gain_sentence(by_seed, TINY, "standard", "grpo-n4")
    assert outcome == report.CANNOT_TELL and "+2.0 points, 95% CI [-3.0, 7.0] over 3 seeds" in sentence
    # mean 2, s = 2: t_{0.975,n-1} * 2 / sqrt(n) < 2 first at n = 7 (2.4469 < 2.6458; at 6, 2.5706 > 2.4495)
    assert sentence.endswith("an interval would clear the threshold from 7 seeds.")
    sentence, outcome = report.base_gain_sentence(by_seed, TINY, "standard", "est")
    assert outcome == report.CANNOT_TELL and "+5.0 points on 1 seed (one seed: no interval)" in sentence
    worse = tables.weighted_by_seed(frame.assign(ave_at_k=frame["ave_at_k"].where(frame["origin"] == "run", 0.55)))
    assert report.base_gain_sentence(worse, TINY, "standard", "grpo-n16")[1] == report.WORSENS  # [47, 49, 48] - 55
    # no base model evaluated: said, not guessed
    sentence, outcome = report.base_gain_sentence(tables.weighted_by_seed(eval_df), TINY, "standard", "seq-balance")
    assert outcome == report.CANNOT_TELL and f"`repro eval {TINY}`" in sentence
    text = report.build_report(frame)
    lines = text.splitlines()
    heading = "## Does RL move the model? Each method against the base model"
    section = lines[lines.index(heading) + 1 : lines.index("## Table 1: weighted average (measured runs)")]
    bullets = [line for line in section if line.startswith("- **")]
    assert [b.split("**")[1] for b in bullets] == [
        "GRPO-n4 vs the base model",
        "GRPO-n16 vs the base model",
        "Seq-pos vs the base model",
        "Seq-balance vs the base model",
        "Est vs the base model",
    ]


def test_report_file_has_the_headings_tables_sentences_and_figures(eval_df, training_df, tmp_path, capsys) -> None:
    results = _results(tmp_path / "results", eval_df, training_df)
    assert cli.main(["report", "--results", str(results)]) == 0
    target = results / "REPORT.md"
    assert f"wrote {target}" in capsys.readouterr().err
    text = target.read_text()
    lines = text.splitlines()
    assert lines[0] == "# Reinforce-Ada reproduction: report"
    for heading in (
        "## Comparisons with the paper",
        "## Table 1: weighted average (measured runs)",
        "## Table 2: step time",
        "## Sampling per training step",
        "## Figures",
    ):
        assert heading in lines, heading
    assert lines.index("## Comparisons with the paper") < lines.index("## Table 1: weighted average (measured runs)")
    # Table 1: seq-balance [43, 46, 46] -> 45.0, [40.7, 49.3]; paired to GRPO-n4 +3.0, [0.5, 5.5] over 3 seeds
    assert (
        f"| {TINY} | standard | seq-balance | 3 | 45.0 | 45.0 | 45.0 | [40.7, 49.3] | — | — | +3.0 | [0.5, 5.5] | 3 |"
        in text
    )
    assert f"| {TINY} | standard | est | 1 | 45.0 | 45.0 | 45.0 | — | — | — | +5.0 | — | 1 |" in text
    assert f"| {TINY} | grpo-n16 | 1 | 4.00 | — | — | — |" in text  # step time, no GRPO-n4 timed
    bullets = [line for line in lines if line.startswith("- **")]
    assert len(bullets) == len(report.COMPARISONS)
    assert (
        f"- {TINY}: no base model evaluated; `repro eval {TINY} --runs-root RUNS` and `repro collect` add it." in lines
    )
    assert "Verdict: **agrees**. Stability: **fragile**" in bullets[0]
    assert "Verdict: **disagrees**." in bullets[1] and "Verdict: **cannot tell**." in bullets[2]
    assert "- reward-curve: ![reward-curve](figures/reward-curve.png) ([PDF](figures/reward-curve.pdf))" in lines
    assert "sampling.pdf" not in text
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_report_without_training_or_figures_still_writes(eval_df, tmp_path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    eval_df.to_parquet(results / "eval.parquet")
    out = tmp_path / "elsewhere" / "R.md"
    assert cli.main(["report", "--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "No training table in the results: run `repro collect`." in text
    assert "No figures yet" in text
    assert "Cost: no sampler metrics or step times measured for Seq-balance and GRPO-n16 on tiny-arith." in text


def test_report_without_results_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    assert cli.main(["report", "--results", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"error: no results in {tmp_path / 'nowhere'}; run `repro collect` first\n"


def test_report_help_has_examples(capsys) -> None:
    assert cli.main(["report", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Examples" in out and "repro report --results results" in out


# ------------------------------------------------------------------------------------- beyond the paper


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (-0.5, 2.0, report.AGREES),  # any loss smaller than the 1-point margin
        (-0.9, -0.1, report.DISAGREES),  # a loss is measured, however small
        (-2.5, 1.0, report.CANNOT_TELL),  # a loss of up to 2.5 points is not excluded
        (-1.0, 3.0, report.CANNOT_TELL),  # exactly at the margin is not above it
        (math.nan, math.nan, report.CANNOT_TELL),
    ],
)
def test_no_loss_verdict(low: float, high: float, expected: str) -> None:
    assert report.no_loss_verdict(stats.Interval((low + high) / 2, low, high, 3)) == expected


def test_async_sentence_by_hand() -> None:
    """seq-balance-async - seq-balance per seed: [44, 46, 47] - [43, 46, 46] = [1, 0, 1] -> mean 2/3,
    s = 0.57735, half width 4.3027 * 0.57735 / sqrt(3) = 1.434 -> [-0.77, 2.10]: above -1, agrees. Step
    times 1.5 s vs 2.0 s (step 1 left out): 0.75x."""
    rows = []
    for method, values in {"seq-balance": (0.43, 0.46, 0.46), "seq-balance-async": (0.44, 0.46, 0.47)}.items():
        for seed, value in enumerate(values):
            rows += _rows(TINY, method, seed, value)
    frame = pd.DataFrame(rows)
    training = pd.DataFrame([*_steps("seq-balance", 96.0, 32.0, 2.0), *_steps("seq-balance-async", 96.0, 32.0, 1.5)])
    by_seed = tables.weighted_by_seed(frame)
    step_time = tables.step_time_table(training, "standard")
    sentence, outcome = report.async_sentence(by_seed, TINY, report.ASYNC_COMPARISONS[0], step_time)
    assert outcome == report.AGREES
    assert sentence == (
        f"**Seq-balance async vs Seq-balance** ({TINY}, standard): measured paired difference +0.7 points, 95% CI "
        '[-0.8, 2.1] over 3 seeds; against "no loss" (a loss smaller than 1.0 point): **agrees**. Stability: '
        "**fragile**: the mean stays above -1.0 with any one of the 3 seeds left out; 3 fresh seeds would repeat this "
        "verdict with probability 0.72 if the measured mean and spread (s = 0.6 points between seeds) were the "
        "truth. Step time: 0.75x the synchronous one's (1.50 s vs 2.00 s, same machine)."
    )
    text = report.build_report(frame, training)
    assert "## Beyond the paper: sampling overlapped with training" in text and sentence in text
    assert "## Beyond the paper" not in report.build_report(pd.DataFrame(_rows(TINY, "grpo-n4", 0, 0.4)))
