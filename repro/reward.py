"""The project's one reward function: math-verify on the last \\boxed{...} (PROTOCOL.md "Verifier").

The answer is taken as the released training reward takes it (`released_boxed`): the content of the last
`\\boxed{`, and none at all when that box never closes, even if an earlier box is complete (a response cut
off mid-answer earns nothing). An empty box is no answer either. The project's earlier rule, which fell
back to an earlier balanced box, stays available as `BOXED_RULE = "fallback"` (`last_boxed`).

Training on CPU, the verl reward hook (`custom_reward_function`) and evaluation all call `compute_score`,
so a response is judged the same way everywhere. Failures to parse or verify score 0 and are counted,
never raised: one odd response must not stop a run.

The comparison itself is `repro.verifier.judge` (math-verify, memoised). Its time limits use SIGALRM,
which only works in the main thread. verl calls the reward in executor threads, so there `compute_score`
hands verification to a worker process with a hard limit (`repro.evaluation.judge_pool.JudgePool`, the
evaluation grader's workers, which run the same `judge`): a call over `REWARD_TIMEOUT_S` is abandoned by
killing the worker, scores 0 and is counted as "timeout". Verdicts are memoised in this process either
way, so a repeated answer never leaves it.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import Counter

from repro import verifier
from repro.evaluation.judge_pool import JudgePool
from repro.verifier import judge as _judge  # the main-thread comparison; tests and repro.local.heldout use this name

STATS: Counter[str] = Counter()
REWARD_TIMEOUT_S = 10.0  # hard limit per verification off the main thread (the worker is killed past it)
REWARD_INNER_TIMEOUT_S = 5  # math-verify's own parse/verify alarm inside that worker, as in the main thread


BOXED_RULES = ("released", "fallback")
BOXED_RULE = "released"  # which box the training reward grades; "fallback" is the pre-issue-13 rule


def _closed_box(text: str, start: int) -> str | None:
    """Content of the `\\boxed{` at `start` when its braces close, else None."""
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def released_boxed(text: str) -> str | None:
    """Content of the last \\boxed{ (found with rfind) when its braces close, else None: the released rule."""
    start = text.rfind("\\boxed{")
    return None if start == -1 else _closed_box(text, start)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} with balanced braces, or None: the "fallback" rule.

    When the last box is unbalanced this falls back to an earlier one, which the released training reward
    does not do; the training reward uses `released_boxed` unless `BOXED_RULE` says "fallback"."""
    start = text.rfind("\\boxed{")
    while start != -1:
        found = _closed_box(text, start)
        if found is not None:
            return found
        start = text.rfind("\\boxed{", 0, start)  # unbalanced: try an earlier one
    return None


def reward_answer(text: str, rule: str | None = None) -> str | None:
    """The stripped answer the training reward grades under `rule` (default `BOXED_RULE`); None if none or empty."""
    rule = BOXED_RULE if rule is None else rule
    if rule not in BOXED_RULES:
        raise ValueError(f"unknown boxed rule {rule!r}; valid: {', '.join(BOXED_RULES)}")
    boxed = released_boxed(text) if rule == "released" else last_boxed(text)
    boxed = None if boxed is None else boxed.strip()
    return boxed or None


_GRADER = None  # the off-main-thread worker (a JudgePool), started on first use; its pid guards against forks
_GRADER_PID = 0
_GRADER_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget memoised verdicts and stop the off-main-thread worker (the next call starts a fresh one)."""
    global _GRADER
    verifier.clear_cache()
    with _GRADER_LOCK:
        if _GRADER is not None and os.getpid() == _GRADER_PID:
            _GRADER.close()
        _GRADER = None


def _shared_grader():
    """This process's hard-limit grading worker, (re)made with the current limits; call under _GRADER_LOCK."""
    global _GRADER, _GRADER_PID
    if _GRADER is None or os.getpid() != _GRADER_PID:  # a forked child must not share its parent's pipe
        _GRADER = JudgePool(timeout_s=REWARD_TIMEOUT_S, inner_timeout_s=REWARD_INNER_TIMEOUT_S)
        _GRADER_PID = os.getpid()
        atexit.register(clear_cache)  # stop the worker while the interpreter can still do so cleanly
    return _GRADER


def _judge_hard(prediction: str, ground_truth: str) -> tuple[float, str]:
    """`_judge` off the main thread: memo first, else the worker process, under a hard time limit.

    One worker per process, one item at a time (a JudgePool is not thread-safe); verl's reward workers are
    separate processes, and in-thread verification was serialised by the GIL anyway."""
    global _GRADER
    known = verifier.recall(prediction, ground_truth)
    if known is not None:
        return known
    with _GRADER_LOCK:
        try:
            grade = _shared_grader().judge(prediction, ground_truth)
        except RuntimeError:  # the worker could not start: score 0, counted, and try a fresh one next time
            _GRADER = None
            return 0.0, "error"
    result = (grade.score, grade.outcome)
    if grade.outcome in ("correct", "wrong", "parse_failed"):
        verifier.remember(prediction, ground_truth, result)
    return result


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """verl's custom reward signature; 1.0 when the last boxed answer equals the reference, else 0.0.

    The answer is `reward_answer` (the released rule unless `BOXED_RULE` says otherwise); none, an unclosed
    last box or an empty box scores 0 as "no_boxed". Results are memoised on (boxed content, reference):
    verification is a pure function of the two, and small models repeat answers constantly.
    """
    boxed = reward_answer(solution_str)
    if boxed is None:
        STATS["no_boxed"] += 1
        return 0.0
    judge = _judge if verifier.in_main_thread() else _judge_hard
    score, outcome = judge(boxed, str(ground_truth).strip())
    STATS[outcome] += 1
    return score
