"""REPORT.md's sections beyond the paper that are judged against "no loss" (`verdicts.no_loss_verdict`): the async
schedule against its synchronous method, and the early exit against the same method without it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from repro.report import early_exit, tables
from repro.report.comparisons import ASYNC_COMPARISONS, EXIT_COMPARISONS, Comparison, _measured_clause, _step_seconds
from repro.report.verdicts import NO_LOSS_MARGIN, no_loss_verdict, stability_clause


def async_sentence(
    by_seed: pd.DataFrame, backbone: str, comparison: Comparison, step_time: pd.DataFrame | None
) -> tuple[str, str]:
    """(the sentence, its verdict) for an async method against its synchronous one: the paired difference,
    the no-loss verdict, and the step-time ratio measured in the same runs."""
    measured, interval = _measured_clause(by_seed, backbone, comparison)
    outcome = no_loss_verdict(interval)
    sentence = (
        f'**{comparison.title}** ({backbone}, {comparison.prompt_set}): {measured}; against "no loss" (a loss '
        f"smaller than {NO_LOSS_MARGIN:.1f} point): **{outcome}**. "
    )
    values = tables.paired_values(by_seed, backbone, comparison.prompt_set, comparison.method, comparison.reference)
    sentence += stability_clause(values, outcome, shift=NO_LOSS_MARGIN)
    seconds = _step_seconds(step_time, backbone, comparison)
    if seconds is not None:
        ratio, mine, theirs = seconds
        sentence += f" Step time: {ratio} the synchronous one's ({mine:.2f} s vs {theirs:.2f} s, same machine)."
    return sentence, outcome


def _no_loss_bullets(
    by_seed: pd.DataFrame,
    training_df: pd.DataFrame | None,
    backbones: list[str],
    comparisons: Sequence[Comparison],
    more: Callable[[str, Comparison], list[str | None]] = lambda backbone, comparison: [],
) -> list[str]:
    """One bullet per comparison with a trained run of its method: `async_sentence`, then `more`'s clauses."""
    bullets = []
    for backbone in backbones:
        for comparison in comparisons:
            trained = by_seed[(by_seed["backbone"] == backbone) & by_seed["trained"].astype(bool)]
            if not (trained["method"] == comparison.method).any():
                continue
            step_time = tables.step_time_table(training_df, comparison.prompt_set) if training_df is not None else None
            sentence, _ = async_sentence(by_seed, backbone, comparison, step_time)
            sentence += "".join(f" {clause}" for clause in more(backbone, comparison) if clause)
            bullets.append(f"- {sentence}")
    return bullets


def _exit_lines(by_seed: pd.DataFrame, training_df: pd.DataFrame | None, backbones: list[str]) -> list[str]:
    """The section "the early exit", or nothing when no run of an exit method was collected."""

    def clauses(backbone: str, comparison: Comparison) -> list[str | None]:
        if training_df is None:
            return []
        where = (training_df, backbone, comparison.prompt_set, comparison.method)
        return [early_exit.token_clause(*where, comparison.reference), early_exit.bias_clause(*where)]

    bullets = _no_loss_bullets(by_seed, training_df, backbones, EXIT_COMPARISONS, clauses)
    if not bullets:
        return []
    return [
        "## Beyond the paper: the early exit",
        "",
        "Seq-balance with the order-preserving exit: a prompt's responses are numbered in request order, the rule "
        "is checked on the longest prefix of that order that has all returned, and once it holds the rest are "
        "cancelled (in flight) or dropped (back already): the pool is what a one-at-a-time sampler keeps, whatever "
        "the lengths. The claim tested is that it costs no accuracy (as async's); beside it the tokens it saves "
        "and, on the same returns, how far the first-returned cut (keep whatever came back first) would have moved "
        "the kept responses' reward and length. At paper scale the cost model puts the saving at about 1% of "
        "Seq-balance's tokens (`repro simulate cost`, `benchmarks/bench_early_exit.py`).",
        "",
        *bullets,
        "",
    ]


def _async_lines(by_seed: pd.DataFrame, training_df: pd.DataFrame | None, backbones: list[str]) -> list[str]:
    """The section "sampling overlapped with training", or nothing when no run of an async method was collected."""
    bullets = _no_loss_bullets(by_seed, training_df, backbones, ASYNC_COMPARISONS)
    if not bullets:
        return []
    return [
        "## Beyond the paper: sampling overlapped with training",
        "",
        "The async schedule samples step t+1 with the weights before update t while update t runs (one step "
        "stale, token-level truncated importance weights as verl's rollout correction computes them). The "
        "claim tested is that this costs no accuracy: **agrees** when the 95% interval of the paired "
        f"difference lies above -{NO_LOSS_MARGIN:.1f} point, **disagrees** when it lies below 0, **cannot "
        "tell** otherwise.",
        "",
        *bullets,
        "",
    ]
