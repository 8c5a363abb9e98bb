"""Ave@k at the same generated tokens, from the compute-matched long runs (issue 45; `sweeps/tiny-matched.yaml`).

Per step, a method that draws more responses spends more generation; per seed, the side of a comparison that
generated fewer tokens by its last step was trained on (`repro run --extend`, `repro.sweep_matched`) until its
cumulative generated tokens reached the other side's total. Here each pair is read seed by seed: the side with
more tokens at its final checkpoint (the per-step tables' reading), the other at the first step of its long run
whose cumulative tokens reach that total (a kept, evaluated checkpoint), so the long side has at most one
step's tokens more; two runs already that close (`sweep_matched.within_a_step`) are both read at their final
checkpoints. Both are the weighted Ave@k of the tables' protocol; the held-out slice stays a training
curve. The difference (method - reference) is paired by seed with the same t interval as the per-step
comparisons. Each reading also carries how many passes over its prompt set the run had made
(`training/epochs_seen`): the longer baseline repeats its prompts, a cost the comparison must show.

The curve (`curve_points`) is every evaluated checkpoint of a method x seed: the reference run's and its long
run's, which continues it, against cumulative generated tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from repro.report import bench, stats
from repro.report.comparisons import (
    ASYNC_COMPARISONS,
    COMPARISONS,
    EXIT_COMPARISONS,
    PAPER_STAND_IN,
    Comparison,
    _label,
    paper_difference,
)
from repro.report.matched import accuracy_by_tokens
from repro.report.schema import GENERATED_CUMULATIVE
from repro.report.tables import paired_values
from repro.report.verdicts import (
    CANNOT_TELL,
    NO_LOSS_MARGIN,
    interval_text,
    no_loss_verdict,
    points_text,
    stability_clause,
    verdict,
)
from repro.sweep_matched import within_a_step

EPOCHS = "training/epochs_seen"
CELL = ["backbone", "prompt_set", "method", "seed"]


@dataclass(frozen=True)
class Reading:
    """One side of one seed's matched pair: the step read, its cumulative tokens, epochs and Ave@k (%)."""

    step: int
    tokens: float
    epochs: float
    ave: float
    long_run: bool  # read from the long run (trained on to the other side's total)


@dataclass(frozen=True)
class SeedPair:
    seed: int
    method: Reading
    reference: Reading

    @property
    def difference(self) -> float:
        return self.method.ave - self.reference.ave


def _finals(training: pd.DataFrame) -> pd.DataFrame:
    """Per reference run (cell): its last step, tokens through it, epochs."""
    rows = training.dropna(subset=[GENERATED_CUMULATIVE]).sort_values("step").groupby("run").tail(1)
    return rows.set_index(CELL)


def _weighted(eval_df: pd.DataFrame) -> pd.DataFrame:
    from repro.report.schema import WEIGHTED_AVERAGE

    rows = eval_df[eval_df["benchmark"] == WEIGHTED_AVERAGE]
    return rows.set_index([*CELL, "checkpoint_step"])["ave_at_k"]


def _epochs(row: pd.Series) -> float:
    return float(row[EPOCHS]) if EPOCHS in row.index and pd.notna(row[EPOCHS]) else float("nan")


def seed_pairs(
    tables: dict[str, pd.DataFrame], backbone: str, prompt_set: str, method: str, reference: str
) -> tuple[list[SeedPair], list[str]]:
    """(one reading per seed where both sides are measured at equal tokens, one line per seed that is not)."""
    training, eval_df = tables.get("training"), tables.get("eval")
    long_training, long_eval = tables.get("matched_training"), tables.get("matched_eval")
    if training is None or eval_df is None or GENERATED_CUMULATIVE not in training.columns:
        return [], []
    finals = _finals(training)
    evaluated = _weighted(eval_df)
    long_evaluated = _weighted(long_eval) if long_eval is not None and not long_eval.empty else pd.Series(dtype=float)
    seeds = sorted(
        set(
            training.loc[
                (training["backbone"] == backbone)
                & (training["prompt_set"] == prompt_set)
                & (training["method"] == method),
                "seed",
            ]
        )
        & set(
            training.loc[
                (training["backbone"] == backbone)
                & (training["prompt_set"] == prompt_set)
                & (training["method"] == reference),
                "seed",
            ]
        )
    )
    pairs, missing = [], []
    for seed in seeds:
        keys = {m: (backbone, prompt_set, m, seed) for m in (method, reference)}
        if not all(k in finals.index for k in keys.values()):
            continue
        total = {m: float(finals.loc[k, GENERATED_CUMULATIVE]) for m, k in keys.items()}
        high, low = sorted((method, reference), key=lambda m: -total[m])
        readings: dict[str, Reading] = {}
        final = finals.loc[keys[high]]
        step = int(final["step"])
        if (*keys[high], step) in evaluated.index:
            readings[high] = Reading(
                step, total[high], _epochs(final), 100 * float(evaluated[(*keys[high], step)]), False
            )
        low_final = finals.loc[keys[low]]
        if within_a_step(total[low], int(low_final["step"]), total[high]):  # matched already: no long run
            step = int(low_final["step"])
            if (*keys[low], step) in evaluated.index:
                readings[low] = Reading(
                    step, total[low], _epochs(low_final), 100 * float(evaluated[(*keys[low], step)]), False
                )
        elif long_training is not None and not long_training.empty:
            run = long_training.set_index(CELL).sort_index()
            if keys[low] in run.index:
                steps = run.loc[[keys[low]]].sort_values("step")
                reached = steps[steps[GENERATED_CUMULATIVE] >= total[high]]
                if not reached.empty:
                    at = reached.iloc[0]
                    step = int(at["step"])
                    if (*keys[low], step) in long_evaluated.index:
                        readings[low] = Reading(
                            step,
                            float(at[GENERATED_CUMULATIVE]),
                            _epochs(at),
                            100 * float(long_evaluated[(*keys[low], step)]),
                            True,
                        )
        if len(readings) == 2:
            pairs.append(SeedPair(int(seed), readings[method], readings[reference]))
        else:
            missing.append(
                f"seed {seed}: {low} has no evaluated checkpoint at {total[high]:,.0f} generated tokens "
                f"({high}'s total; `repro sweep run sweeps/tiny-matched.yaml` trains and evaluates it)"
            )
    return pairs, missing


def curve_points(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every evaluated checkpoint of every run and long run against its cumulative generated tokens: the
    columns of `matched.accuracy_by_tokens` and `long_run` (a long run's checkpoint)."""
    frames = [accuracy_by_tokens(tables["eval"], tables["training"]).assign(long_run=False)]
    if tables.get("matched_eval") is not None and not tables["matched_eval"].empty:
        frames.append(accuracy_by_tokens(tables["matched_eval"], tables["matched_training"]).assign(long_run=True))
    points = pd.concat(frames, ignore_index=True)
    return points.sort_values([*CELL, "tokens"], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class Judged:
    """A comparison as the report judges it at equal tokens: its rule (`judge` maps an interval to a verdict or
    None for no claim), the rule in words, and the shift the stability clause tests against (the no-loss
    margin, or 0 for the sign)."""

    title: str
    method: str
    reference: str
    prompt_set: str
    judge: Callable[[stats.Interval], str | None]
    rule: str
    shift: float = 0.0


def _tokens(value: float) -> str:
    return f"{value / 1e6:.2f}M"


def _span(values: list[float], fmt: Callable[[float], str]) -> str:
    low, high = min(values), max(values)
    return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)}-{fmt(high)}"


def sentence(tables: dict[str, pd.DataFrame], per_step: list[float], backbone: str, judged: Judged) -> str | None:
    """The report's bullet for one comparison: both readings, the equal-token verdict and its stability, and the
    tokens, steps and epochs of each side; None when neither side ran on this backbone and prompt set."""
    pairs, missing = seed_pairs(tables, backbone, judged.prompt_set, judged.method, judged.reference)
    head = f"**{judged.title}** ({backbone}, {judged.prompt_set})"
    step_interval = stats.t_interval(per_step)
    step_text = interval_text(step_interval) if step_interval.n else "not measured"
    if not pairs:
        if not missing:
            return None
        return f"{head}: per step {step_text}; at equal generated tokens not measured ({'; '.join(missing)})."
    values = [p.difference for p in pairs]
    interval = stats.t_interval(values)
    outcome = judged.judge(interval) if interval.has_interval else CANNOT_TELL
    sides = []
    for name, side in ((judged.method, [p.method for p in pairs]), (judged.reference, [p.reference for p in pairs])):
        grown = "trained on to " if any(r.long_run for r in side) else ""
        steps = _span([float(r.step) for r in side], lambda v: f"{v:.0f}")
        epochs = _span([r.epochs for r in side], lambda v: f"{v:.1f}")
        sides.append(f"{name} {grown}step {steps} ({_span([r.tokens for r in side], _tokens)} tokens, {epochs} epochs)")
    text = (
        f"{head}: per step {step_text}; **at equal generated tokens {interval_text(interval)}** "
        f"({' vs '.join(sides)}); "
    )
    if outcome is None:
        text += f"{judged.rule}."
    else:
        text += f"{judged.rule}: **{outcome}**. {stability_clause(values, outcome, shift=judged.shift)}"
    if missing:
        text += f" Not read: {'; '.join(missing)}."
    return text


def equal_token_comparisons() -> list[Judged]:
    """Every comparison the report makes, as the equal-token section judges it: the paper's on the sign of the
    paper's per-step difference, async on "no loss", the bench's on its paper's per-token claim (none: no
    verdict)."""

    def judged(c: Comparison | bench.BenchClaim, judge, rule: str, shift: float = 0.0) -> Judged:
        title = c.title if isinstance(c, Comparison) else f"{_label(c.method)} vs {_label(c.reference)}"
        return Judged(title, c.method, c.reference, c.prompt_set, judge, rule, shift)

    out = []
    for comparison in COMPARISONS:
        delta = paper_difference(PAPER_STAND_IN, comparison)[0]
        rule = f"on the sign of the paper's per-step difference ({points_text(delta)})" if delta else "no paper sign"
        out.append(judged(comparison, lambda interval, d=delta: verdict(interval, d), rule))
    no_loss = f'against "no loss" (a loss under {NO_LOSS_MARGIN:.1f} point)'
    out += [judged(c, no_loss_verdict, no_loss, NO_LOSS_MARGIN) for c in (*ASYNC_COMPARISONS, *EXIT_COMPARISONS)]
    rules = {None: "its paper claims nothing per token", bench.BETTER: "on its paper's claim (better)"}
    for claim in bench.CLAIMS:  # the bench's own judge of its paper's per-token claim
        rule = rules.get(claim.per_token, no_loss)
        shift = NO_LOSS_MARGIN if claim.per_token == bench.NO_LOSS else 0.0
        out.append(judged(claim, lambda interval, c=claim.per_token: bench.judge_claim(c, interval), rule, shift))
    return out


def equal_token_lines(by_seed: pd.DataFrame, tables_: dict[str, pd.DataFrame], backbones: list[str]) -> list[str]:
    """The section "At the same generated tokens", or nothing when no compute-matched long run was collected."""
    if tables_.get("matched_training") is None or tables_["matched_training"].empty:
        return []
    bullets = []
    for backbone in backbones:
        for judged in equal_token_comparisons():
            per_step = list(paired_values(by_seed, backbone, judged.prompt_set, judged.method, judged.reference))
            line = sentence(tables_, per_step, backbone, judged)
            if line is not None:
                bullets.append(f"- {line}")
    return [
        "## Beyond the paper: at the same generated tokens",
        "",
        "Every comparison above, read a second way. Per seed, the side that generated fewer tokens by step 100 was "
        "trained on from its step-100 checkpoint (the same run, longer: same data order, a learning rate that is "
        "warm-up then constant) until its cumulative generated tokens reached the other side's step-100 total "
        "(`sweeps/tiny-matched.yaml`); both sides are then the weighted Ave@k of the tables' protocol, paired by "
        "seed, with the same 95% t interval, verdict rule and stability statement as their per-step sentence. Each "
        "sentence gives the per-step reading first, then the equal-token one, the steps, tokens and passes over "
        "its prompt set (epochs) each side had at its reading: a long baseline repeats its prompts.",
        "",
        *bullets,
        "",
    ]
