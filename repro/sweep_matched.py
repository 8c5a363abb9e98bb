"""A sweep's compute-matched baselines (`matched:` in a sweep file; issue 45): per seed, the method of a pair
that generated fewer tokens by its last step trains on until it reaches the other's total.

The paper compares per step, and a method that draws more responses per step spends more generation. The
question a reader asks is whether the adaptive method beats the plain one trained *longer on the same
generated tokens*. A sweep file names the pairs per prompt set (`seq-balance vs grpo-n4`); once both runs of
a pair have finished for a seed, the side with fewer tokens gets a long run (`repro run --extend`): one per
method, prompt set and seed, whose budget is the largest total it must reach (one long GRPO-n4 run serves
Est, PODS and Seq-balance), whose checkpoints are kept at each total it is compared at and at every fifth
of its budget not within a tenth of the budget of one of those (the points of the accuracy-against-tokens
curve), and whose step cap is `STEP_CAP_FACTOR`
times the steps the budget needs at the reference run's tokens per step (responses get shorter or longer as
the policy learns; a cap reached before the budget is reported by the run and by the report).

Two runs whose totals differ by at most the lower one's tokens per step are already matched at the
resolution the matching has (a long run would stop one step later, overshooting by as much): both are read at
their final checkpoints and no long run is trained (`within_a_step`; the async schedule against its
synchronous method, Knapsack RL against GRPO-n8).

The cells exist only once the runs they depend on have finished, since their budgets are read from those
runs: a long run of a method waits until every pair it is in has both runs finished (which side extends
depends on both totals), so its budget never changes under it (a changed budget would be a different run,
and its resume is refused).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.cell import Extension, ResolvedCell
from repro.errors import ReproError
from repro.rundir import RunDir
from repro.sampling.metrics import GENERATED

STEP_CAP_FACTOR = 3  # a long run's step cap over the steps its budget needs at its reference's tokens per step
CURVE_POINTS = 5  # checkpoints kept at every 1/CURVE_POINTS of a long run's budget (past its reference's)
SEPARATOR = " vs "


@dataclass(frozen=True)
class MatchedPair:
    """`method vs reference` on one prompt set, as the report compares them."""

    method: str
    reference: str
    prompt_set: str

    @property
    def sides(self) -> tuple[str, str]:
        return self.method, self.reference


def parse_pairs(raw: Any, where: str) -> tuple[MatchedPair, ...]:
    """`matched:` of a sweep file: {prompt set: ["A vs B", ...]}; every problem one ReproError line."""
    example = "(e.g. matched: {standard: [seq-balance vs grpo-n4]})"
    if not isinstance(raw, dict) or not raw:
        raise ReproError(f"{where}: 'matched' must map prompt sets to lists of 'METHOD vs REFERENCE' {example}")
    pairs = []
    for prompt_set, items in raw.items():
        if not isinstance(items, list) or not items:
            raise ReproError(f"{where}: matched.{prompt_set} must be a non-empty list {example}")
        for item in items:
            parts = item.split(SEPARATOR) if isinstance(item, str) else []
            if len(parts) != 2 or not all(p.strip() for p in parts) or parts[0].strip() == parts[1].strip():
                raise ReproError(f"{where}: matched.{prompt_set}: {item!r} is not 'METHOD vs REFERENCE' {example}")
            pairs.append(MatchedPair(parts[0].strip(), parts[1].strip(), str(prompt_set)))
    return tuple(dict.fromkeys(pairs))


def run_tokens(run_dir: Path) -> tuple[int, int] | None:
    """(last step, tokens generated through it) of a finished run, as its trainer counted them (the sum of each
    step's `tokens/generated`); None while it has not finished."""
    if not (run_dir / "config.yaml").is_file():
        return None
    run = RunDir(run_dir)
    if run.state != "finished":
        return None
    by_step = run.read_metrics().by_step
    if not by_step:
        return None
    return max(by_step), sum(int(data.get(GENERATED, 0)) for data in by_step.values())


def within_a_step(low_total: float, low_steps: int, high_total: float) -> bool:
    """Whether two runs' totals are already equal at the matching's own resolution: the gap is at most the
    lower run's mean tokens per step (a long run would stop one step later, overshooting by as much), so both
    are read at their final checkpoints and no long run is trained."""
    return high_total - low_total <= low_total / max(low_steps, 1)


def targets(pairs: Iterable[MatchedPair], found: dict[str, tuple[int, int]]) -> dict[str, list[int]]:
    """Method -> the token totals it must reach: for each pair (`found`: method -> (last step, total)), the side
    with fewer tokens, the other's total, unless they are equal within a step (`within_a_step`)."""
    out: dict[str, list[int]] = {}
    for pair in pairs:
        low, high = sorted(pair.sides, key=lambda m: found[m][1])
        if not within_a_step(found[low][1], found[low][0], found[high][1]):
            out.setdefault(low, []).append(found[high][1])
    return out


def extension(last_step: int, total: int, wanted: Sequence[int]) -> Extension:
    """The long run that takes a run of `total` tokens at `last_step` to the largest of `wanted`."""
    budget = max(wanted)
    # a curve point closer than half a step of the curve to a compared total adds nothing the total does not show
    near = budget / (2 * CURVE_POINTS)
    curve = {math.ceil(budget * i / CURVE_POINTS) for i in range(1, CURVE_POINTS + 1)}
    curve = {t for t in curve if all(abs(t - w) >= near for w in wanted)}
    keep = tuple(sorted({t for t in (*wanted, *curve) if t > total}))
    steps = math.ceil(last_step * budget / max(total, 1) * STEP_CAP_FACTOR)
    return Extension(until_tokens=budget, keep_tokens=keep, steps=max(steps, last_step + 1))


def matched_cells(
    pairs: Sequence[MatchedPair], reference_cells: Sequence[ResolvedCell], runs_root: Path
) -> tuple[list[ResolvedCell], list[str]]:
    """(the long runs whose budgets are known, one line per long run still waiting for its reference runs):
    `reference_cells` is the grid of the pairs' methods x prompt sets x seeds, in the sweep's order."""
    by_name = {cell.reference_name: cell for cell in reference_cells}
    groups: dict[tuple[str, str, int], dict[str, ResolvedCell]] = {}
    for cell in reference_cells:
        groups.setdefault((cell.label, cell.prompt_set.key, cell.seed), {})[cell.method.key] = cell
    ready: dict[str, ResolvedCell] = {}
    waiting: list[str] = []
    for (_label, prompt_set, _seed), cells in groups.items():
        mine = [p for p in pairs if p.prompt_set == prompt_set]
        found = {m: run_tokens(runs_root / cells[m].reference_name) for m in {m for p in mine for m in p.sides}}
        done = {m: t for m, t in found.items() if t is not None}
        for method in dict.fromkeys(m for p in mine for m in p.sides):
            involved = [p for p in mine if method in p.sides]
            missing = sorted({cells[m].reference_name for p in involved for m in p.sides if m not in done})
            if missing:
                waiting.append(f"{cells[method].reference_name}: waits for {', '.join(missing)} to finish")
                continue
            wanted = targets(involved, done).get(method)
            if wanted:
                last_step, total = done[method]
                ready[cells[method].reference_name] = dataclasses.replace(
                    cells[method], extension=extension(last_step, total, wanted)
                )
    ordered = [ready[name] for name in by_name if name in ready]
    return ordered, waiting
