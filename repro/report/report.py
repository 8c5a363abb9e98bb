"""results/REPORT.md: the tables, the figures, and one sentence per comparison the paper makes.

The comparisons (`COMPARISONS`) are the paper's headline claims: Seq-balance against GRPO-n4, against
GRPO-n16 (which pays 4x the update cost of n4), Seq-pos against Seq-balance, Est against GRPO-n4, and
Seq-balance against GRPO-n4 on the hard prompt set. For each measured backbone each gets one sentence:
the measured paired difference of the weighted Ave@k (method - reference, seed by seed: same backbone,
prompt set and seed, so the same data order) with its Student t 95% interval and the number of seeds
(`repro.report.stats`: seeds are few, the t interval is exact for normal seed noise and honest about
small n, a bootstrap over 3 values is degenerate), the paper's difference of the same two weighted
averages, and a verdict.

Verdict rule (about the sign of the difference, the paper's claim; not about its size, which a miniature
cannot be expected to match):

- "agrees": the measured 95% interval excludes 0 and lies on the side of the paper's difference;
- "disagrees": the interval excludes 0 and lies on the other side;
- "cannot tell": the interval contains 0 (an endpoint at exactly 0 counts as containing it), or there is
  no interval (one seed in common, or none), or the paper reports no difference (missing or 0).

The paper's numbers come from `repro.paper` (Table 1 and the weighted averages of every method). A
backbone the paper did not train (the CPU miniature tiny-arith) is compared against the paper's
Qwen2.5-Math-1.5B rows, and the sentence says so.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from repro.report import bench, equal_tokens, matched, tables
from repro.report.comparisons import (
    ASYNC_COMPARISONS,
    COMPARISONS,
    PAPER_STAND_IN,
    Comparison,
    _label,
    _measured_clause,
    _ratio,
    _step_seconds,
    difference_text,
    paper_difference,
)
from repro.report.no_loss import _async_lines, _exit_lines, async_sentence
from repro.report.verdicts import (
    AGREES,
    CANNOT_TELL,
    DISAGREES,
    FIRM_REPEAT,
    decimal_text,
    no_loss_verdict,
    points_text,
    stability_clause,
    verdict,
)

__all__ = [
    "AGREES",
    "ASYNC_COMPARISONS",
    "CANNOT_TELL",
    "COMPARISONS",
    "DISAGREES",
    "IMPROVES",
    "PAPER_STAND_IN",
    "WORSENS",
    "Comparison",
    "async_sentence",
    "base_gain_sentence",
    "build_report",
    "comparison_sentence",
    "figure_links",
    "no_loss_verdict",
    "paper_difference",
    "verdict",
]

IMPROVES = "improves"  # RL against the base model: the paper reports no base numbers, so no agree/disagree
WORSENS = "worsens"
FIGURE_SUFFIXES = (".png", ".svg")  # embedded; a .pdf of the same name is linked beside


def _paper_clause(backbone: str, comparison: Comparison) -> tuple[str, float | None]:
    delta, mine, theirs, source = paper_difference(backbone, comparison)
    if delta is None:
        return f"the paper reports no such pair for {source}/{comparison.prompt_set}", None
    where = f"{source}, {comparison.prompt_set}"
    if source != backbone:
        where += f"; {backbone} is a miniature, so compared against the paper's {source} rows"
    numbers = f"{decimal_text(mine)} vs {decimal_text(theirs)}, {where}"
    return f"the paper reports {points_text(delta)} points ({numbers})", delta


def _cost_clause(
    sampling: pd.DataFrame | None, step_time: pd.DataFrame | None, backbone: str, comparison: Comparison
) -> str:
    """What the method paid against the reference: update responses, drawn responses and seconds per step."""
    a, b = _label(comparison.method), _label(comparison.reference)
    parts = []
    if sampling is not None and not sampling.empty:
        cell = sampling[(sampling["backbone"] == backbone) & (sampling["prompt_set"] == comparison.prompt_set)]
        rows = {m: cell[cell["method"] == m] for m in (comparison.method, comparison.reference)}
        if all(len(r) == 1 for r in rows.values()):
            for column, what in (
                ("update responses per step", "responses in the update per step"),
                ("responses per step", "responses drawn per step"),
            ):
                mine, theirs = (float(rows[m][column].iloc[0]) for m in (comparison.method, comparison.reference))
                ratio = _ratio(mine, theirs)
                if ratio is not None:
                    parts.append(f"{ratio} {b}'s {what} ({decimal_text(mine)} vs {decimal_text(theirs)})")
    seconds = _step_seconds(step_time, backbone, comparison)
    if seconds is not None:
        ratio, mine, theirs = seconds
        parts.append(f"{ratio} its seconds per step ({mine:.2f} s vs {theirs:.2f} s)")
    if not parts:
        return f"Cost: no sampler metrics or step times measured for {a} and {b} on {backbone}."
    return f"Cost: {a} used " + "; ".join(parts) + "."


def base_gain_sentence(by_seed: pd.DataFrame, backbone: str, prompt_set: str, method: str) -> tuple[str, str]:
    """(the sentence, its outcome) for how far RL moved `method` from the base model it started from: the
    precondition of every comparison above (a miniature whose training does not move the model cannot rank
    samplers). Outcomes: "improves" / "worsens" when the 95% interval excludes 0, else "cannot tell"."""
    interval, base = tables.gain_over_base(by_seed, backbone, prompt_set, method)
    head = f"**{_label(method)} vs the base model** ({backbone}, {prompt_set})"
    if math.isnan(base):
        return (
            f"{head}: the base model was not evaluated (`repro eval {backbone}`). Verdict: **{CANNOT_TELL}**.",
            CANNOT_TELL,
        )
    if interval.n == 0:
        return (
            f"{head}: no trained run measured on the base model's benchmarks. Verdict: **{CANNOT_TELL}**.",
            CANNOT_TELL,
        )
    measured = difference_text(interval)
    if not interval.has_interval:
        outcome = CANNOT_TELL
    else:
        outcome = IMPROVES if interval.low > 0 else WORSENS if interval.high < 0 else CANNOT_TELL
    gains, _ = tables.gain_values(by_seed, backbone, prompt_set, method)
    stability = stability_clause(gains, outcome)
    return (
        f"{head}: {decimal_text(base)} -> {decimal_text(base + interval.mean)}, {measured}. "
        f"Verdict: **{outcome}**. {stability}",
        outcome,
    )


def comparison_sentence(
    by_seed: pd.DataFrame,
    backbone: str,
    comparison: Comparison,
    sampling: pd.DataFrame | None = None,
    step_time: pd.DataFrame | None = None,
) -> tuple[str, str]:
    """(the sentence, its verdict) for one comparison on one backbone, from `tables.weighted_by_seed` rows."""
    measured, interval = _measured_clause(by_seed, backbone, comparison)
    reported, delta = _paper_clause(backbone, comparison)
    outcome = verdict(interval, delta)
    sentence = f"**{comparison.title}** ({backbone}, {comparison.prompt_set}): {measured}; {reported}. "
    sentence += f"Verdict: **{outcome}**. "
    values = tables.paired_values(by_seed, backbone, comparison.prompt_set, comparison.method, comparison.reference)
    sentence += stability_clause(values, outcome)
    if comparison.cost:
        sentence += " " + _cost_clause(sampling, step_time, backbone, comparison)
    return sentence, outcome


# ------------------------------------------------------------------------------------------ the file


def arithmetic_lines(runs_df: pd.DataFrame | None) -> list[str]:
    """The report's header line on what the runs computed with (repro.arithmetic): the pinned arithmetic and
    the CPUs, counted over runs, so a reader on another machine knows whether to expect the same bits."""
    if runs_df is None or runs_df.empty or "arithmetic" not in runs_df.columns:
        return []
    from repro.report.schema import BASE_MODEL_LABEL

    trained = runs_df[runs_df["method"] != BASE_MODEL_LABEL]  # a model's evaluation is not a run

    def counted(column: str) -> str:
        counts = trained[column].fillna("not recorded").value_counts()
        return "; ".join(f"{name} ({count} runs)" for name, count in sorted(counts.items()))

    return [f"Arithmetic: {counted('arithmetic')}. CPUs: {counted('cpu')}.", ""]


def figure_links(figures_dir: Path, relative_to: Path) -> list[str]:
    """One markdown line per figure under `figures_dir` (PNG/SVG embedded, the PDF beside linked), with
    paths relative to the folder REPORT.md lives in, so the report renders wherever the results travel."""
    if not figures_dir.is_dir():
        return []
    figures_dir, relative_to = figures_dir.resolve(), relative_to.resolve()
    lines = []
    for image in sorted(p for p in figures_dir.iterdir() if p.suffix.lower() in FIGURE_SUFFIXES and p.is_file()):
        link = Path(os.path.relpath(image, relative_to)).as_posix()
        line = f"- {image.stem}: ![{image.stem}]({link})"
        pdf = image.with_suffix(".pdf")
        if pdf.is_file():
            line += f" ([PDF]({Path(os.path.relpath(pdf, relative_to)).as_posix()}))"
        lines.append(line)
    return lines


def _backbones(by_seed: pd.DataFrame) -> list[str]:
    trained = by_seed[by_seed["trained"].astype(bool)] if len(by_seed) else by_seed
    return tables.sorted_backbones(trained["backbone"].unique() if len(trained) else [])


def build_report(
    eval_df: pd.DataFrame,
    training_df: pd.DataFrame | None = None,
    figures: Sequence[str] = (),
    *,
    source: str = "results",
    checkpoint: str | int = "final",
    runs_df: pd.DataFrame | None = None,
    matched_tables: dict[str, pd.DataFrame] | None = None,
) -> str:
    """The markdown text of REPORT.md from the tidy eval (and training) tables and the figure lines."""
    by_seed = tables.weighted_by_seed(eval_df, checkpoint=checkpoint)
    weighted = tables.weighted_average_table(eval_df, checkpoint=checkpoint, measured_only=True)
    sampling = tables.sampling_table(training_df) if training_df is not None else None
    backbones = _backbones(by_seed)
    lines = [
        "# Reinforce-Ada reproduction: report",
        "",
        f"Generated by `repro report` from `{source}` (checkpoint: {checkpoint}). Accuracies are weighted Ave@k "
        "in percent; differences are in percentage points.",
        "",
        *arithmetic_lines(runs_df),
        "## Comparisons with the paper",
        "",
        "Each sentence gives the measured paired difference of the weighted average (method - reference on the "
        "same backbone, prompt set and seed, so the same data order), its 95% Student t interval over seeds, "
        "the number of seeds, the paper's difference, and a verdict on the sign: **agrees** (the interval "
        "excludes 0 on the paper's side), **disagrees** (it excludes 0 on the other side), **cannot tell** (it "
        "contains 0, or one seed gives no interval, or the paper reports no difference). The t interval "
        "because seeds are few: it is exact for normal seed-to-seed noise and honest about small n, where a "
        "bootstrap over 3 values is degenerate. A backbone the paper did not train (tiny-arith) is compared "
        "against the paper's Qwen2.5-Math-1.5B rows. Each verdict then says how firm it is: whether one seed "
        "carries the sign (the mean with each seed left out; an interval over the 2 seeds left would be "
        "t_{0.975,1} = 12.7 wide and contain 0 for almost any data, so it would say nothing), how often as "
        f"many fresh seeds would repeat a decided verdict if the measured mean and spread were the truth "
        f"(the t test's power at the measured effect; **firm** at {FIRM_REPEAT:.1f} or more with the sign "
        "kept, else **fragile**), and for **cannot tell** how many seeds would decide it.",
        "",
    ]
    if not backbones:
        lines += ["No trained run was measured: nothing to compare.", ""]
    for backbone in backbones:
        if len(backbones) > 1:
            lines += [f"### {backbone}", ""]
        for comparison in COMPARISONS:
            step_time = None
            if comparison.cost and training_df is not None:
                step_time = tables.step_time_table(training_df, comparison.prompt_set)
            sentence, _ = comparison_sentence(by_seed, backbone, comparison, sampling, step_time)
            lines.append(f"- {sentence}")
        lines.append("")

    lines += _async_lines(by_seed, training_df, backbones)
    lines += _exit_lines(by_seed, training_df, backbones)
    lines += bench.section_lines(by_seed, eval_df, training_df)
    if training_df is not None and matched_tables:
        lines += equal_tokens.equal_token_lines(
            by_seed, {"eval": eval_df, "training": training_df, **matched_tables}, backbones
        )
    if training_df is not None:
        lines += matched.section_lines(eval_df, training_df)

    base_lines = []
    for backbone in backbones:
        if math.isnan(tables.gain_over_base(by_seed, backbone, "", "")[1]):
            base_lines.append(
                f"- {backbone}: no base model evaluated; `repro eval {backbone} --runs-root RUNS` and `repro collect` "
                "add it."
            )
            continue
        cells = by_seed[(by_seed["backbone"] == backbone) & by_seed["trained"].astype(bool)]
        for prompt_set in tables.sorted_names(cells["prompt_set"].unique(), "prompt_set"):
            for method in tables.sorted_names(cells.loc[cells["prompt_set"] == prompt_set, "method"], "method"):
                sentence, _ = base_gain_sentence(by_seed, backbone, prompt_set, method)
                base_lines.append(f"- {sentence}")
    if base_lines:
        lines += [
            "## Does RL move the model? Each method against the base model",
            "",
            "The precondition of the comparisons above: the weighted average after training minus the base "
            "model's (the model every run starts from), with the 95% t interval over the method's seeds. The "
            "base model is evaluated once, so its own sampling noise is a shared offset the interval leaves out. "
            "The paper reports no base-model numbers, so the verdict is **improves**, **worsens** or "
            "**cannot tell**, not agreement.",
            "",
            *base_lines,
            "",
        ]
    lines += [
        "## Table 1: weighted average (measured runs)",
        "",
        'Ave@k in percent, mean over seeds (n_seeds); "95% CI" is the Student t interval over seeds, "—" '
        'where one seed gives none; "delta grpo-n4" is the mean paired difference to the same backbone and '
        "prompt set's GRPO-n4 over the seeds both trained (n_paired), with its own t interval. `repro table "
        "weighted-average` also shows the paper's rows no run reproduced.",
        "",
        tables.to_markdown(weighted).rstrip("\n"),
        "",
    ]
    if training_df is None:
        lines += ["## Table 2: step time", "", "No training table in the results: run `repro collect`.", ""]
    else:
        step_time = tables.step_time_table(training_df, measured_only=True)
        lines += [
            "## Table 2: step time",
            "",
            "Seconds per training step (step 1, start-up, left out), mean over runs; the paper's are on 8xH100, "
            "so compare the relative columns.",
            "",
            tables.to_markdown(step_time).rstrip("\n"),
            "",
            "## Sampling per training step",
            "",
            tables.to_markdown(sampling).rstrip("\n") if sampling is not None and not sampling.empty else "None.",
            "",
        ]
    lines += ["## Figures", ""]
    lines += list(figures) or ["No figures yet: run `repro plot ...` (results/figures/)."]
    return "\n".join(lines).rstrip("\n") + "\n"
