"""The integer shortcut of `repro.verifier.judge` gives math-verify's own verdict, checked against math-verify."""

from __future__ import annotations

import itertools

import pytest

from repro import verifier

CANONICAL = [
    "0", "1", "-1", "7", "-7", "10", "12", "-12", "99", "100", "1000000", "1000001", "123456", "123457",
    "999999999999998", "999999999999999", "-999999999999999", "123456789012345",
]  # fmt: skip


def test_every_pair_of_canonical_integers_gets_math_verifys_verdict():
    verifier.clear_cache()
    pairs = list(itertools.product(CANONICAL, repeat=2))
    for prediction, reference in pairs:
        fast = verifier.integer_verdict(prediction, reference)
        slow = verifier.judge(prediction, reference, use_cache=False, integers=False)
        assert fast == slow, (prediction, reference, fast, slow)
    assert sum(verifier.integer_verdict(p, r)[0] for p, r in pairs) == len(CANONICAL)  # only the diagonal


@pytest.mark.parametrize(
    "text", ["007", "-0", "+5", "1,000", "1.0", "1e3", " 5", "5 ", "1234567890123456", "--1", "", "x", "½"]
)
def test_anything_but_a_canonical_integer_goes_to_math_verify(text):
    assert verifier.integer_verdict(text, "5") is None
    assert verifier.integer_verdict("5", text) is None


def test_the_shortcut_is_what_judge_returns_and_it_memoises_nothing():
    verifier.clear_cache()
    assert verifier.judge("41", "42") == (0.0, "wrong")
    assert verifier.judge("42", "42") == (1.0, "correct")
    assert verifier.recall("41", "42") is None
    assert verifier.judge("042", "42") == (1.0, "correct")  # math-verify's own verdict, then memoised
    assert verifier.recall("042", "42") == (1.0, "correct")
