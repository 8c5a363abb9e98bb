"""math-verify's verdict on an answer already taken out of its box, memoised (PROTOCOL.md "Verifier").

The one comparison behind every math-verify grade: the training reward (`repro.reward.compute_score`)
calls it in the main thread, and the hard-limit workers (`repro.evaluation.judge_pool`) call it for the
evaluation's math-verify modes and for the reward off the main thread. It lives below both so that
neither imports the other for it.

Verdicts are memoised in this process on (answer, reference): verification is a pure function of the
two, and small models repeat answers constantly. Timeouts and errors are never memoised, so a transient
failure cannot stick to an answer.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

MEMO_LIMIT = 500_000  # verdicts kept per process; past it, new ones are computed but not stored

_CACHE: dict[tuple[str, str], tuple[float, str]] = {}


# A canonical integer: no sign on zero, no leading zeros, at most 15 digits (exact in a float64, so no
# tolerance anywhere in math-verify can make two different ones equal). Two of these are the same number
# exactly when they are the same string, which is math-verify's verdict on them too
# (`tests/test_verifier_integers.py` checks it against math-verify itself).
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]{0,14}")


def integer_verdict(prediction: str, ground_truth: str) -> tuple[float, str] | None:
    """The verdict on two canonical integers without parsing them, or None for anything else: math-verify
    spends ~4 ms parsing each new pair through sympy, and a small model's wrong answers are mostly new
    integers (on tiny-arith the reward was as slow as generating the responses)."""
    if _CANONICAL_INT.fullmatch(prediction) and _CANONICAL_INT.fullmatch(ground_truth):
        return (1.0, "correct") if prediction == ground_truth else (0.0, "wrong")
    return None


def in_main_thread() -> bool:
    """math-verify's time limits use SIGALRM, which only the main thread can receive."""
    return threading.current_thread() is threading.main_thread()


@lru_cache(maxsize=4096)
def _gold(ground_truth: str, seconds: int | None = 5):
    from math_verify import LatexExtractionConfig, parse

    return parse(f"\\boxed{{{ground_truth}}}", extraction_config=[LatexExtractionConfig()], parsing_timeout=seconds)


def recall(prediction: str, ground_truth: str) -> tuple[float, str] | None:
    """The memoised (score, outcome) of this pair, or None when it was not judged here yet."""
    return _CACHE.get((prediction, ground_truth))


def remember(prediction: str, ground_truth: str, result: tuple[float, str]) -> None:
    """Memoise a verdict (while the memo has room); the caller decides which outcomes are worth keeping."""
    if len(_CACHE) < MEMO_LIMIT:
        _CACHE[(prediction, ground_truth)] = result


def clear_cache() -> None:
    """Forget every memoised verdict and parsed reference."""
    _CACHE.clear()
    _gold.cache_clear()


def judge(
    prediction: str, ground_truth: str, *, timeout: int = 5, use_cache: bool = True, integers: bool = True
) -> tuple[float, str]:
    """math-verify's verdict, memoised; two canonical integers are compared as strings (`integer_verdict`,
    the same verdict) unless `integers` is False. Its timeouts use SIGALRM, which exists only in the main
    thread; elsewhere (verl runs reward functions in executor threads) they are switched off rather than
    letting every call fail. Errors are not memoised, so a transient failure cannot stick to an answer."""
    known = integer_verdict(prediction, ground_truth) if integers else None
    if known is None and use_cache:
        known = recall(prediction, ground_truth)
    if known is not None:
        return known
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    seconds = timeout if in_main_thread() else None
    try:
        gold = _gold(ground_truth, seconds)
        pred = parse(
            f"\\boxed{{{prediction}}}",
            extraction_config=[ExprExtractionConfig(), LatexExtractionConfig()],
            parsing_timeout=seconds,
        )
        if not pred:
            result = (0.0, "parse_failed")
        else:
            ok = verify(gold, pred, timeout_seconds=seconds)
            result = (1.0, "correct") if ok else (0.0, "wrong")
    except TimeoutError:
        return 0.0, "timeout"
    except Exception:  # math-verify/sympy raise many types on odd input; the response simply scores 0
        return 0.0, "error"
    if use_cache:
        remember(prediction, ground_truth, result)
    return result
