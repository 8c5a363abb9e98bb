"""Answer extraction for the three grading modes (PROTOCOL.md "Verifier" and "Evaluation: Ave@32").

The released code takes the answer out of a response in three different ways, and the choice changes
scores, so each is a named mode:

- "reward": the training reward (`repro.reward.released_boxed`): the last `\\boxed{`, nothing if unclosed.
- "boxed": the released evaluation of MATH500 / OlympiadBench / AIME-like (`stack_boxed` below).
- "qwen-math": the released evaluation of Minerva Math (`repro.evaluation.qwen_math.extract_answer`).

`extract(text, mode)` gives the answer the mode would grade, or None when it finds none (an empty answer
is no answer in every mode: the released code scores it 0).
"""

from __future__ import annotations

import re

from repro import reward
from repro.evaluation import qwen_math

GRADING_MODES = ("reward", "boxed", "qwen-math")

_BOXED_WORD = re.compile(r"\\boxed\s+([a-zA-Z0-9]+)")


def stack_boxed(text: str) -> str:
    """The released evaluation's extractor: one pass with a stack of open-brace positions.

    The content of the `\\boxed{...}` that closed last wins, so `\\boxed{\\boxed{1}}` gives `\\boxed{1}`;
    an unmatched `}` anywhere means no answer (""); with no braced box, the first `\\boxed 5`-style word."""
    opened: list[int] = []
    last: str | None = None
    for i, char in enumerate(text):
        if char == "{":
            opened.append(i)
        elif char == "}":
            if not opened:
                return ""
            start = opened.pop()
            if text.endswith("\\boxed", 0, start):
                last = text[start + 1 : i]
    if last is not None:
        return last
    match = _BOXED_WORD.search(text)
    return match.group(1) if match else ""


def check_mode(mode: str) -> str:
    if mode not in GRADING_MODES:
        raise ValueError(f"unknown grading mode {mode!r}; valid: {', '.join(GRADING_MODES)}")
    return mode


def extract(text: str, mode: str) -> str | None:
    """The answer `mode` grades in `text` (stripped of surrounding space), or None when there is none."""
    check_mode(mode)
    if mode == "reward":
        answer = reward.reward_answer(text)
    elif mode == "boxed":
        answer = stack_boxed(text)
    else:
        answer = qwen_math.extract_answer(text)
    answer = None if answer is None else answer.strip()
    return answer or None
