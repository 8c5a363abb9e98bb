"""The verdict rules every REPORT section shares: the sign of an interval against a claimed sign, non-inferiority
against a margin ("no loss"), and how firm a verdict is (repro.report.report's module docstring states them)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from repro.report import stats

AGREES = "agrees"
DISAGREES = "disagrees"
CANNOT_TELL = "cannot tell"

# The loss in weighted Ave@k (points) below which "no loss" still holds: a tenth of the gap the paper's
# headline comparison opens (Seq-balance - GRPO-n4 on Qwen2.5-Math-1.5B, about 2 points weighted, would
# be cut in half by a larger loss).
NO_LOSS_MARGIN = 1.0


def verdict(interval: stats.Interval, paper_delta: float | None) -> str:
    """repro.report.report's rule: the sign of the measured interval against the paper's sign."""
    if not interval.has_interval or paper_delta is None or not math.isfinite(paper_delta) or paper_delta == 0:
        return CANNOT_TELL
    if interval.low <= 0 <= interval.high:
        return CANNOT_TELL
    return AGREES if (interval.low > 0) == (paper_delta > 0) else DISAGREES


def no_loss_verdict(interval: stats.Interval, margin: float = NO_LOSS_MARGIN) -> str:
    """Non-inferiority of a schedule change: **disagrees** when the whole 95% interval is below 0 (a loss is
    measured), **agrees** when its lower end is above -margin (any loss is smaller than the margin), else
    (or with no interval) **cannot tell**."""
    if not interval.has_interval:
        return CANNOT_TELL
    if interval.high < 0:
        return DISAGREES
    return AGREES if interval.low > -margin else CANNOT_TELL


def points_text(value: float) -> str:
    value = round(value, 1) + 0.0  # no "-0.0"
    return f"{value:+.1f}" if value else "0.0"


def decimal_text(value: float) -> str:
    """A percentage to one decimal, never "-0.0" (a difference that rounds to nothing reads as none)."""
    return f"{round(value, 1) + 0.0:.1f}"


def interval_text(interval: stats.Interval) -> str:
    """A paired difference in words: its mean, 95% t interval and seeds (one seed: no interval)."""
    if interval.n == 0:
        return "no seed measured by both"
    if not interval.has_interval:
        return f"{points_text(interval.mean)} points on 1 seed (no interval)"
    return (
        f"{points_text(interval.mean)} points, 95% CI [{decimal_text(interval.low)}, {decimal_text(interval.high)}] "
        f"over {interval.n} seeds"
    )


FIRM_REPEAT = 0.8  # a decided verdict is "firm" when n fresh seeds would repeat it at least this often


def stability_clause(values: Sequence[float], outcome: str, shift: float = 0.0) -> str:
    """How firm a verdict over per-seed `values` is (repro.report.stats, "how firm a verdict is"): whether one
    seed carries the sign, how often as many fresh seeds would repeat a decided verdict, and for an undecided
    one how many seeds would decide it at the measured mean and spread. `shift` moves the threshold from 0
    (the no-loss verdict's margin)."""
    shifted = [v + shift for v in values]
    found = stats.stability(shifted)
    if found is None:
        return f"Stability: {len(shifted)} seed(s), too few to judge (3 or more)."
    n = len(shifted)
    side = f"{'above' if sum(shifted) > 0 else 'below'} {points_text(-shift)}"
    kept = "keeps its sign" if not shift else f"stays {side}"
    flips = "flips the mean's sign" if not shift else f"takes the mean past {points_text(-shift)}"
    sign = (
        f"the mean {kept} with any one of the {n} seeds left out"
        if found.sign_kept
        else f"single seeds carry it: leaving out any one of {len(found.flips_without)} of the {n} seeds {flips}"
    )
    spread = f"s = {found.spread:.1f} points between seeds"
    if outcome == CANNOT_TELL:
        need = found.seeds_to_exclude
        decide = (
            f"at the measured mean and spread ({spread}) an interval would clear the threshold from {need} seeds"
            if need is not None
            else f"no number of seeds up to 1000 would decide it at the measured mean and spread ({spread})"
        )
        return f"Stability: {sign}; {decide}."
    firm = "firm" if found.sign_kept and found.repeat >= FIRM_REPEAT else "fragile"
    return (
        f"Stability: **{firm}**: {sign}; {n} fresh seeds would repeat this verdict with probability "
        f"{found.repeat:.2f} if the measured mean and spread ({spread}) were the truth."
    )
