"""Grading for evaluation: an answer taken out of each response in one of three modes, then compared.

Three grading modes follow the released code (`repro.evaluation.extract`, PROTOCOL.md "Verifier" and
"Evaluation: Ave@32"): "reward" (the training reward: released last-box rule, math-verify), "boxed" (the
released evaluation of MATH500 / OlympiadBench / AIME-like: stack extractor, math-verify) and "qwen-math"
(the released Minerva Math evaluation: Qwen2.5-Math's extraction and `math_equal`). The answer is
extracted in the parent (cheap string work); only the comparison goes to a worker process of
`repro.evaluation.judge_pool`, under a hard time limit per item, so one pathological answer cannot stall
an evaluation of hundreds of thousands of responses.

As with any spawn-based code, a script that creates a `Grader` at import time needs the usual
`if __name__ == "__main__":` guard.
"""

from __future__ import annotations

from collections.abc import Iterable

from repro.evaluation.extract import GRADING_MODES, check_mode, extract
from repro.evaluation.judge_pool import OUTCOMES, Grade, JudgePool, Key, job_key
from repro.evaluation.judge_pool import _Worker as _Worker  # the workers' process handle, patched by tests

__all__ = ["GRADING_MODES", "OUTCOMES", "Grade", "Grader", "benchmark_grading"]

DEFAULT_MODE = "reward"  # grade/grade_many without a mode: compute_score's verdict


def benchmark_grading(name: str) -> str:
    """The grading mode for benchmark `name`: the released evaluation's (catalog `grading`) for the paper's
    benchmarks; "reward" for the tiny-arith tiers; "boxed" for any other benchmark outside the catalog.

    Why the tiny tiers take the training reward's rule: they are this project's construct, and a grader
    stricter than the reward lets a miniature lose points to a quirk it was paid for. Measured: under the
    released extractor ("boxed", an unmatched `}` means no answer) two of three Seq-balance seeds on the
    standard set, which had learned to answer `\\boxed{9}}` (3% and 8% of their responses; the reward, the
    last box verified, pays for it), scored 10.9 and 6.9 weighted against 14.0 for the third seed."""
    from repro import catalog
    from repro.tasks.tiny_arith import TIERS

    if name in TIERS:
        return "reward"
    entry = catalog.benchmarks().get(name)
    return "boxed" if entry is None else entry.grading


class Grader(JudgePool):
    """Grading in one of `GRADING_MODES` with a hard per-item time limit, memoised, with outcome counts.

    `grade(response, ground_truth, mode)` extracts the mode's answer (`repro.evaluation.extract.extract`;
    none: "no_boxed", without touching a worker) and compares it with the reference in a worker. The default
    mode, "reward", is exactly `repro.reward.compute_score`'s verdict. Results are memoised on (mode,
    extracted answer, reference), timeouts included; the reference is stripped for the math-verify modes
    and kept raw for "qwen-math", as the released code does.
    `grade_many` sends each worker one batch and gets one reply per item, so the time limit applies to each
    item: when an item runs over, only that item scores "timeout", the worker is replaced and the rest of the
    batch continues; finished items are never re-graded. `counts()` tallies outcomes over all calls, cache
    hits included; `worker_calls` is the number of items the workers verified, as they report it.

    Not thread-safe: use one Grader per thread (each has its own workers). The constructor's arguments and
    `judge` (an answer already out of its box) are `JudgePool`'s.
    """

    def grade(self, response: str, ground_truth: str, mode: str = DEFAULT_MODE) -> Grade:
        return self.grade_many([(response, ground_truth)], mode=mode)[0]

    def grade_many(self, pairs: Iterable[tuple[str, str]], mode: str = DEFAULT_MODE) -> list[Grade]:
        """Grades of (response, reference) pairs under `mode` (one of GRADING_MODES), in order."""
        check_mode(mode)
        keys: list[Key | None] = []
        for response, ground_truth in pairs:
            answer = extract(response, mode)
            keys.append(None if answer is None else job_key(mode, answer, ground_truth))
        return self._grade_keys(keys)
