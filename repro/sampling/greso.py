"""GRESO's pre-rollout skipping ("Act only when it pays", github Infini-AI-Lab/GRESO at b277843), rule for rule.

Before any rollout, a prompt whose recent groups were all solved (group mean >= 0.98) or none solved (mean
<= 0.11) is skipped with a probability that grows with the length of that streak: 1 - max(p^c, 0.01), with
separate keep factors p_easy and p_hard. After each step both factors move by 0.01 toward a target share of
zero-variance groups (a third of the target for all-solved groups, two thirds for the all-format-only ones),
within [0.05, 0.95]. The kept prompts are rolled out DAPO-style: zero-variance groups are dropped and rounds
are added until the update batch is full, each refill sized from the last round's zero-variance share.
PS = verl/trainer/ttis/presampling_selector.py, RT = verl/trainer/ppo/ray_trainer.py.

Followed where the authors' code is defined, quirks included:
- a prompt's history is the mean reward of every group it was rolled out in, dropped groups included
  (RT:1119-1132); only the trailing streak counts, and a skipped prompt's streak is frozen;
- the shares steering the factors count all-solved groups (every reward == 1) and all-format-only groups
  (every reward == the format score 0.1) among the responses of every round since the last step; all-wrong
  groups (every reward 0) count as neither (RT:1112-1114 with metric_utils.py:205-212), so with 0/1 rewards
  p_hard only ever rises;
- the first epoch does not move the factors (RT:1207).
Where it is not defined, this module diverges, and says so:
- a round whose groups are all zero-variance makes the refill size divide by zero (RT:1156); here the refill
  is the largest round and not the last.
How a step runs it (`repro.sampling.policies.GresoPolicy`), with what the bench's drivers change:
- rounds are sized relative to the step's update prompts (384 and 64 of 256 in the authors' script), so a
  miniature keeps their shape;
- a round is that many prompts that were not skipped; the authors' round is whole dataloader
  batches until at least that many were kept (up to a batch more), trimmed to a multiple of the GPU count
  (RT:1006-1013); here the round is filled to exactly its size;
- "the first epoch" (RT:1207) is read as: no prompt rolled out in this step had been rolled out before
  (the drivers draw epochs without replacement, so this is the first epoch until the first repeat);
- a step stops after `max_rounds` rounds (the authors' loop runs to the end of the epoch).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from repro.atomic import write_text
from repro.sampling.settings import GresoSettings

EASY_MEAN = 0.98  # a group counted solved for the streak (PS:112)
HARD_MEAN = 0.11  # a group counted unsolved (PS:131, PS:137)
KEEP_FLOOR = 0.01  # the smallest keep probability: every prompt keeps a 1% chance (PS:117, PS:142)
FACTOR_STEP = 0.01  # the keep factors' move per step (RT:1212-1219)
OVERPROVISION = 1.25  # the refill's margin (RT:1156)
FORMAT_SCORE = 0.1  # the latex_math scorer's reward for a wrong boxed answer: "hard" in the shares
EASY, HARD, KEPT = 0, 1, 2  # the authors' skip log (PS:239-247)


def _streak(history: Sequence[float], solved: bool) -> int:
    count = 0
    for mean in reversed(history):
        if (mean >= EASY_MEAN) if solved else (mean <= HARD_MEAN):
            count += 1
        else:
            break
    return count


def skip_probabilities(history: Sequence[float], p_easy: float, p_hard: float) -> tuple[float | None, float | None]:
    """(easy, hard): the chance the prompt is skipped as all-solved, then (if it was not) as unsolved; None
    where the authors' code returns before drawing (no history; last group mean above 0.11)."""
    if not history:
        return None, None
    easy = 1 - max(p_easy ** _streak(history, True), KEEP_FLOOR)
    if history[-1] > HARD_MEAN:
        return easy, None
    return easy, 1 - max(p_hard ** _streak(history, False), KEEP_FLOOR)


def skip(histories: Sequence[Sequence[float]], p_easy: float, p_hard: float, draw: Callable[[], float]) -> list[int]:
    """EASY, HARD or KEPT for each prompt, in order, drawing uniform numbers as the authors do: one for every
    prompt with a history, a second one only for a prompt not skipped as easy whose last mean is <= 0.11."""
    out = []
    for history in histories:
        easy, hard = skip_probabilities(history, p_easy, p_hard)
        if easy is not None and draw() < easy:
            out.append(EASY)
        elif hard is not None and draw() < hard:
            out.append(HARD)
        else:
            out.append(KEPT)
    return out


def update_factors(
    p_easy: float, p_hard: float, easy_share: float, hard_share: float, settings: GresoSettings
) -> tuple[float, float]:
    """Each keep factor one FACTOR_STEP down when its share reached its target (skip more), else up."""
    target_easy, target_hard = settings.targets

    def move(p: float, share: float, target: float) -> float:
        if share >= target:
            return max(p - FACTOR_STEP, settings.min_p)
        return min(p + FACTOR_STEP, settings.max_p)

    return move(p_easy, easy_share, target_easy), move(p_hard, hard_share, target_hard)


def group_shares(groups: Sequence[Sequence[float]]) -> tuple[float, float]:
    """(all-solved, all-format-only) shares of a round's groups, as the factors' update counts them."""
    if not groups:
        return 0.0, 0.0
    easy = sum(all(r == 1 for r in g) for g in groups)
    hard = sum(all(r == FORMAT_SCORE for r in g) for g in groups)
    return easy / len(groups), hard / len(groups)


def pool_shares(rewards: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    """`group_shares` of the groups rewards[i, :sizes[i]], as arrays: the same comparisons, the same counts."""
    if not len(sizes):
        return 0.0, 0.0
    width = int(sizes.max())
    outside = np.arange(width)[None, :] >= sizes[:, None]  # past a group's end: counts as matching, as all([]) is
    rows = rewards[:, :width]
    easy = int(((rows == 1) | outside).all(axis=1).sum())
    hard = int(((rows == FORMAT_SCORE) | outside).all(axis=1).sum())
    return easy / len(sizes), hard / len(sizes)


def refill(missing: int, zero_variance_share: float, settings: GresoSettings, target: int) -> tuple[int, bool]:
    """(prompts to roll out next, whether that round is the last): enough for the `missing` responses at the
    last round's zero-variance share, 25% over, within [64, 384] prompts for an update of 256 (`target`
    update prompts, the settings' ratios); the round is the last when the estimate fits (RT:1155-1162). All
    zero-variance: the largest round (module doc)."""
    largest, floor = settings.round_sizes(target)
    if zero_variance_share >= 1:
        return max(largest, floor), False
    estimate = int(missing / (1 - zero_variance_share) / settings.n * OVERPROVISION)
    last = estimate <= largest
    return max(min(estimate, largest), floor), last


@dataclass
class GresoMemory:
    """What GRESO keeps across steps: every prompt's group means, newest last (RT:1119-1132), and the two
    keep factors as they moved."""

    p_easy: float
    p_hard: float
    histories: dict[str, list[float]] = field(default_factory=dict)

    def history(self, prompt: str) -> list[float]:
        return self.histories.get(prompt, [])

    def save(self, path: str | os.PathLike[str]) -> None:
        write_text(path, json.dumps({"p_easy": self.p_easy, "p_hard": self.p_hard, "histories": self.histories}))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> GresoMemory:
        with open(path) as handle:
            data = json.load(handle)
        return cls(float(data["p_easy"]), float(data["p_hard"]), {k: list(v) for k, v in data["histories"].items()})
