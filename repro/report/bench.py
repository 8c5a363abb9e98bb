"""REPORT.md's "Beyond the paper: other adaptive samplers": each bench method against the baseline its own
paper beat, per training step and at equal generated tokens (issue 36).

Each literature method claims something different, so each comparison carries its paper's claim and the
side it takes per step and per token:
- PODS (Xu et al. 2025, arXiv 2504.13818) trains on m of n drawn responses, picked by maximum reward
  variance, against GRPO that draws and trains on m (its runs: n = 128, m = 32 against n = m = 32,
  open-r1/exp.sh): better per step. Per token it pays n/m = 4x the generation, which its paper does not
  claim back (its axis is wall-clock time with cheap inference), so the token reading is measured, not judged.
- Knapsack RL (Li et al. 2025) spends the same rollouts per step as GRPO (8 per prompt on average against
  n = 8), allocated by a knapsack over pass rates: better per step, and so per token.
- GRESO (2025) skips prompts predicted all-equal before DAPO's dynamic sampling draws them: the same accuracy
  as DAPO per step ("no loss", as the async verdict judges it), reached with fewer rollouts, so better per
  token. Its baseline drew 1.5x the batch per round as GRESO does; the DAPO here draws 1x (the claim says so).

Verdicts follow repro.report.verdicts: **agrees** / **disagrees** / **cannot tell** on the sign for "better",
the non-inferiority rule (`no_loss_verdict`) for "no loss", and no verdict where the paper makes no claim.
The per-step reading is the final checkpoint's weighted Ave@k paired seed by seed (`tables.paired_values`);
the per-token one `matched.paired_at_equal_tokens` on `matched.curve`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from repro.report import matched, stats, tables
from repro.report.verdicts import (
    CANNOT_TELL,
    NO_LOSS_MARGIN,
    interval_text,
    no_loss_verdict,
    stability_clause,
    verdict,
)

BETTER = "better"
NO_LOSS = "no loss"


@dataclass(frozen=True)
class BenchClaim:
    """A literature method against the baseline its paper compares with, and what the paper claims."""

    method: str
    reference: str
    per_step: str | None  # BETTER, NO_LOSS or None (no claim)
    per_token: str | None
    claim: str  # the paper's claim in a sentence, with its source
    prompt_set: str = "standard"


CLAIMS = (
    BenchClaim(
        "pods-16-4",
        "grpo-n4",
        BETTER,
        None,
        "PODS reports higher accuracy than GRPO training on all its m rollouts, reaching GRPO's peak at least "
        "1.7x faster in training time (arXiv 2504.13818; its runs n = 128, m = 32 against n = m = 32, "
        "open-r1/exp.sh); it draws n/m = 4x the tokens per step and claims no token efficiency",
    ),
    BenchClaim(
        "knapsack",
        "grpo-n8",
        BETTER,
        BETTER,
        "Knapsack RL reports +2 to +4 points over GRPO at the same rollout budget (Qwen2.5-Math-7B; 2048 "
        "rollouts for 256 prompts, run_knapsack_grpo_7b.sh), so ahead both per step and per token",
    ),
    BenchClaim(
        "greso",
        "dapo",
        NO_LOSS,
        BETTER,
        "GRESO reports DAPO's accuracy with up to 2.4x faster rollout and 2.0x faster training (it skips "
        "prompts predicted all-equal before drawing them), so no loss per step and ahead per token. Its DAPO "
        "drew 1.5x the batch per round, as GRESO's first round does (384 prompts for 256, "
        "train-scripts/math_qwen_7b_dm_dynamic_sampling.sh:16-17); the DAPO here is the Reinforce-Ada paper's, "
        "rounds of 1x the batch, so GRESO's 1.5x first round is a cost its own baseline shared and this one "
        "does not",
    ),
)


def judge_claim(claim: str | None, interval: stats.Interval) -> str | None:
    if claim is None:
        return None
    return verdict(interval, 1.0) if claim == BETTER else no_loss_verdict(interval)


def _verdict_text(claim: str | None, outcome: str | None, values: list[float]) -> str:
    if claim is None or outcome is None:
        return "no claim to judge"
    shift = NO_LOSS_MARGIN if claim == NO_LOSS else 0.0
    against = f'against "no loss" (a loss under {NO_LOSS_MARGIN:.1f} point)' if claim == NO_LOSS else "on the sign"
    return f"**{outcome}** {against}. {stability_clause(values, outcome, shift=shift)}"


def claim_lines(
    by_seed: pd.DataFrame, points: pd.DataFrame, backbone: str, claim: BenchClaim
) -> tuple[list[str], dict[str, str | None]]:
    """The report's bullet for one claim on one backbone, and its two verdicts ({"step": ..., "token": ...})."""
    step_values = list(tables.paired_values(by_seed, backbone, claim.prompt_set, claim.method, claim.reference))
    step_interval = stats.t_interval(step_values)
    step_outcome = judge_claim(claim.per_step, step_interval) if step_interval.n else CANNOT_TELL
    token_values, reads = matched.paired_at_equal_tokens(
        points, backbone, claim.prompt_set, claim.method, claim.reference
    )
    token_interval = stats.t_interval(token_values)
    token_outcome = judge_claim(claim.per_token, token_interval) if token_interval.n else CANNOT_TELL
    if claim.per_token is None:
        token_outcome = None
    where = ", ".join(
        f"seed {r['seed']}: {r['budget'] / 1e3:.0f}k tokens, step {r['step']} vs {r['reference_step']}" for r in reads
    )
    lines = [
        f"- **{claim.method} vs {claim.reference}** ({backbone}, {claim.prompt_set}). Claim: {claim.claim}.",
        f"  - Per step (final checkpoint, weighted Ave@k): {interval_text(step_interval)}; "
        + _verdict_text(claim.per_step, step_outcome, step_values),
        f"  - At equal generated tokens ({where or 'no budget both reach'}): {interval_text(token_interval)}; "
        + _verdict_text(claim.per_token, token_outcome, token_values),
    ]
    return lines, {"step": step_outcome, "token": token_outcome}


def section_lines(by_seed: pd.DataFrame, eval_df: pd.DataFrame, training_df: pd.DataFrame | None) -> list[str]:
    """The section, or nothing when no bench method was trained."""
    trained = by_seed[by_seed["trained"].astype(bool)] if len(by_seed) else by_seed
    present = [
        (backbone, claim)
        for backbone in tables.sorted_backbones(trained["backbone"].unique() if len(trained) else [])
        for claim in CLAIMS
        if ((trained["backbone"] == backbone) & (trained["method"] == claim.method)).any()
    ]
    if not present:
        return []
    points, what = matched.curve(eval_df, training_df) if training_df is not None else (pd.DataFrame(), "")
    if points.empty:
        points = pd.DataFrame(columns=matched.COLUMNS)
    lines = [
        "## Beyond the paper: other adaptive samplers",
        "",
        "Each method from the literature against the baseline its own paper beat, with that paper's claim. Per "
        "step: the paired difference of the final checkpoints' weighted Ave@k (method - baseline, seed by "
        "seed) and its 95% t interval. At equal generated tokens: per seed, the budget is the smaller of the "
        f"two runs' generated tokens and each is read at its last point within it ({what or 'no readings'}), "
        "which charges a method for the responses it draws and discards. Verdicts: **agrees** / **disagrees** "
        "/ **cannot tell** on the sign where the paper claims better, the no-loss rule where it claims the "
        "same accuracy, none where it makes no claim.",
        "",
    ]
    for backbone, claim in present:
        bullet, _ = claim_lines(by_seed, points, backbone, claim)
        lines += bullet
    lines.append("")
    return lines
