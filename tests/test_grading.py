"""Evaluation grading (repro.evaluation.grading): the training reward's verifier behind a hard time limit.

The grading modes of the released evaluation ("boxed", "qwen-math") are tested in test_grading_modes.py."""

from __future__ import annotations

import functools
import time

import pytest

from repro.evaluation.grading import OUTCOMES, Grade, Grader
from repro.reward import _judge, compute_score, reward_answer

# math-verify takes ~5.4 s on this with its default 5 s signal.alarm (which fires inside the comparison; it then
# answers False), and runs on (measured: past 15 s, under 60 MB) when that alarm is far off: a real input, not a
# test hook.
PATHOLOGICAL = r"The answer is \boxed{9^{9^{9^{9^{9}}}}}."
SHORT_LIMIT = 3.0  # the hard limit under test: what a normal item graded beside the slow one must beat (they
# are integers, which the worker compares as strings: milliseconds, loaded or not), far below...
INNER_S = 120  # ...math-verify's own alarm in those graders, so only the hard limit can stop the item in time.
# Which of the two stopped it is read from the grader's counters, not from a stopwatch (a loaded machine makes any
# wall-clock bound flaky): the hard limit kills the worker before it reports the item, so `worker_calls` does not
# move and the next call starts a replacement (`worker_starts`); math-verify's own alarm is an answer the worker
# sends, so `worker_calls` moves and the worker lives on. The time it took is only checked from below: the hard
# limit never cuts an item short.
HANG_GUARD_S = 300.0  # a limit no normal item comes near, loaded or not: only a guard against a hang
# Graders that check normal outcomes run with both limits far off: under load a normal item can take seconds
# (measured at load 12 on 2 cores: 3.5 s for x^2+2x+1 against (x+1)^2), past math-verify's default 5 s alarm.
GENEROUS = {"timeout_s": HANG_GUARD_S, "inner_timeout_s": INNER_S}

LONG_COT = (
    "Let me think step by step. We need the sum of the roots of $x^2 - 5x + 6 = 0$.\n"
    + "By Vieta's formulas the sum is $-b/a$. " * 40
    + "Checking: the roots are 2 and 3, and $2 + 3 = 5$.\n\n"
    "Therefore, the final answer is $\\boxed{5}$. I hope it is correct."
)

# (response, reference, expected outcome): normal inputs, used for behaviour and for agreement with training
CASES = [
    (r"So $x = \boxed{\frac{1}{2}}$.", "0.5", "correct"),  # fraction against decimal
    (r"\boxed{0.5}", r"\frac{1}{2}", "correct"),
    (r"\boxed{\dfrac{1}{2}}", "0.5", "correct"),
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}", "correct"),  # nested braces
    (r"\boxed{\frac{\sqrt3}2}", r"\frac{\sqrt{3}}{2}", "correct"),
    (r"\boxed{\frac{\sqrt{3}}{2}}", "0.8660254", "correct"),
    (r"First \boxed{1}, on reflection \boxed{2}.", "2", "correct"),  # the last box counts
    (r"First \boxed{1}, on reflection \boxed{2}.", "1", "wrong"),
    (LONG_COT, "5", "correct"),
    (LONG_COT, "6", "wrong"),
    (r"\boxed{x = 5}", "5", "correct"),  # math-verify keeps the right-hand side of an equation
    (r"\boxed{5}", "x = 5", "correct"),
    (r"\boxed{1,000}", "1000", "correct"),  # thousands separators are understood ...
    (r"\boxed{1000}", "1,000", "correct"),
    (r"\boxed{1,000}", "1", "wrong"),  # ... and not read as a list
    (r"\boxed{1,5}", "15", "wrong"),
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", "correct"),
    (r"\boxed{x^2+2x+1}", "(x+1)^2", "correct"),
    (r"\boxed{\pi}", r"\pi", "correct"),
    (r"\boxed{3.14159}", r"\pi", "wrong"),
    (r"\boxed{\frac{1}{3}}", "0.333", "wrong"),  # 6-digit rounding
    (r"\boxed{\frac{1}{3}}", "0.333333", "correct"),
    (r"\boxed{\text{(B)}}", "B", "correct"),
    (r"\boxed{(1,2)}", "(1, 2)", "correct"),
    (r"\boxed{[0,1)}", "[0,1)", "correct"),
    (r"\boxed{\{1,2,3\}}", "1,2,3", "correct"),
    (r"\boxed{50\%}", "50", "wrong"),
    (r"\boxed{-3}", "3", "wrong"),
    (r"\boxed{10^{3}}", "1000", "correct"),
    (r"\boxed{}", "1", "no_boxed"),  # an empty box is no answer (released training reward)
    (r"\boxed{3} and then \boxed{4", "3", "no_boxed"),  # unclosed last box: no answer, no fallback to {3}
]


@pytest.fixture(scope="module")
def grader():
    with Grader(**GENEROUS) as g:
        yield g


def test_outcomes_on_realistic_responses(grader):
    for response, reference, outcome in CASES:
        got = grader.grade(response, reference)
        assert got == Grade(1.0 if outcome == "correct" else 0.0, outcome), (response, reference)


def test_no_box_and_unbalanced_box_score_zero_without_a_worker():
    with Grader(timeout_s=5.0) as g:
        for response in ["The answer is 5.", r"The answer is \boxed{5", r"\boxed {5}", r"\fbox{5}"]:
            assert g.grade(response, "5") == Grade(0.0, "no_boxed")
        assert g.worker_starts == 0 and g.worker_calls == 0
        assert g.counts() == {"no_boxed": 4}


def test_agrees_with_the_training_reward(grader, monkeypatch):
    from repro import reward

    # the reward's main-thread comparison with its alarm as far off as the grader's (see GENEROUS)
    judge = functools.partial(_judge, timeout=INNER_S)
    monkeypatch.setattr(reward, "_judge", judge)
    assert len(CASES) >= 30
    for response, reference, _ in CASES:
        got = grader.grade(response, reference)
        assert got.score == compute_score("test", response, reference), (response, reference)
        answer = reward_answer(response)
        expected = "no_boxed" if answer is None else judge(answer, reference.strip())[1]
        assert got.outcome == expected, (response, reference)


def test_memoised_counted_and_grade_many_matches_grade():
    pairs = [(r, g) for r, g, _ in CASES[:12]] + [("no box here", "1")]
    with Grader(**GENEROUS) as one, Grader(**GENEROUS, workers=2) as many:
        singles = [one.grade(r, g) for r, g in pairs]
        calls = one.worker_calls
        assert calls == 12  # every boxed pair reached the worker once
        assert [one.grade(r, g) for r, g in pairs] == singles
        assert one.worker_calls == calls  # the repeat was served from the parent's memo
        expected = {}
        for grade in singles:
            expected[grade.outcome] = expected.get(grade.outcome, 0) + 2
        assert one.counts() == expected  # cache hits are counted too
        assert set(one.counts()) <= set(OUTCOMES)
        assert one.grade(r"\boxed{ 7 }", "7") == Grade(1.0, "correct")
        assert one.grade(r"so \boxed{7}.", " 7 ") == Grade(1.0, "correct")
        assert one.worker_calls == calls + 1  # memo keyed on stripped (boxed content, reference), as in training

        batch = many.grade_many(pairs + pairs[:3])  # duplicates inside a batch are verified once
        assert batch == singles + singles[:3]
        assert many.worker_calls == 12
        assert many.worker_starts == 2


def test_pathological_input_times_out_and_the_grader_recovers():
    with Grader(timeout_s=SHORT_LIMIT, inner_timeout_s=INNER_S) as g:
        assert g.grade(r"\boxed{7}", "7") == Grade(1.0, "correct")  # worker started, outside the limit
        assert (g.worker_calls, g.worker_starts) == (1, 1)
        start = time.monotonic()
        assert g.grade(PATHOLOGICAL, "1") == Grade(0.0, "timeout")
        assert time.monotonic() - start >= SHORT_LIMIT  # not cut short (from below only: see SHORT_LIMIT)
        assert g.worker_calls == 1  # the worker never reported the item: the hard limit killed it first
        assert not g._workers[0].alive()
        assert g.counts() == {"correct": 1, "timeout": 1}
        assert g.worker_starts == 1  # the killed worker is replaced lazily

        assert g.grade(r"\boxed{3}", "3") == Grade(1.0, "correct")  # still works
        assert (g.worker_calls, g.worker_starts) == (2, 2)
        assert g.grade(PATHOLOGICAL, "1") == Grade(0.0, "timeout")  # the timeout is memoised: no worker sees it
        assert (g.worker_calls, g.worker_starts) == (2, 2) and g._workers[0].alive()  # nothing sent, nothing killed
        assert g.counts() == {"correct": 2, "timeout": 2}


def test_only_the_slow_item_of_a_batch_times_out():
    pairs = [(r"\boxed{1}", "1"), (r"\boxed{2}", "3"), (PATHOLOGICAL, "1"), (r"\boxed{4}", "4"), ("none", "4")]
    with Grader(timeout_s=SHORT_LIMIT, inner_timeout_s=INNER_S) as g:
        grades = g.grade_many(pairs)
        assert [x.outcome for x in grades] == ["correct", "wrong", "timeout", "correct", "no_boxed"]
        assert g.worker_calls == 3  # the finished items were not graded again after the restart
        assert g.worker_starts == 2


def test_math_verify_own_timeout_is_reported_as_timeout():
    # A hard limit far off (a hang guard here), so math-verify's own 1 s alarm fires first. math-verify swallows it (the
    # comparison answers False, so _judge says "wrong"); the grader reads it from math-verify's log and
    # reports a timeout, without losing the worker.
    with Grader(timeout_s=120.0, inner_timeout_s=1) as g:
        assert g.grade(PATHOLOGICAL, "1") == Grade(0.0, "timeout")
        # the worker answered the item itself (math-verify's alarm), so the hard limit never fired: no kill
        assert g.worker_starts == 1 and g.worker_calls == 1 and g._workers[0].alive()
        assert g.grade(r"\boxed{2}", "2") == Grade(1.0, "correct")
        assert g.worker_starts == 1 and g.worker_calls == 2  # the same worker went on


def test_dead_worker_is_restarted_and_closed_grader_refuses():
    g = Grader(**GENEROUS)
    assert g.grade(r"\boxed{2}", "2").score == 1.0
    g._workers[0].proc.kill()
    g._workers[0].proc.join()
    assert g.grade(r"\boxed{3}", "3").score == 1.0
    assert g.worker_starts == 2
    g.close()
    g.close()  # idempotent
    with pytest.raises(RuntimeError):
        g.grade(r"\boxed{3}", "3")


def test_a_failed_restart_raises_and_leaves_no_stale_replies(monkeypatch):
    from repro.evaluation import grading

    slow_too = r"\boxed{10^{10^{10}}}"  # another real slow input (~5.4 s in math-verify at its 5 s alarm)
    with Grader(timeout_s=SHORT_LIMIT, workers=2, inner_timeout_s=INNER_S) as g:
        real_ensure = grading._Worker.ensure
        started = []

        def flaky(self):  # the first two starts work, restarts fail
            if not self.alive():
                if len(started) == 2:
                    raise RuntimeError("cannot start")
                started.append(self)
            real_ensure(self)

        monkeypatch.setattr(grading._Worker, "ensure", flaky)
        with pytest.raises(RuntimeError, match="cannot start"):
            # worker 0: [slow, 2], worker 1: [slow_too, 3]; worker 0's restart fails while worker 1 is busy
            g.grade_many([(PATHOLOGICAL, "1"), (r"\boxed{2}", "2"), (slow_too, "1"), (r"\boxed{3}", "3")])
        monkeypatch.setattr(grading._Worker, "ensure", real_ensure)
        # worker 1 must not answer this call with its abandoned batch
        assert g.grade_many([(r"\boxed{2}", "2"), (r"\boxed{3}", "4")]) == [Grade(1.0, "correct"), Grade(0.0, "wrong")]


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        Grader(timeout_s=0)
    with pytest.raises(ValueError):
        Grader(workers=0)
    with pytest.raises(ValueError):
        Grader(mp_context="fork")


def _in_thread(fn):
    """fn() in a daemon thread (verl scores in executor threads); its result, or fail after HANG_GUARD_S."""
    import threading

    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), f"compute_score off the main thread still running after {HANG_GUARD_S} s"
    return out[0]


def test_training_reward_off_the_main_thread_has_a_hard_time_limit(monkeypatch):
    """verl calls compute_score in executor threads, where math-verify's signal alarm is off: the
    reward must still stop a pathological answer, score it 0 and count it, and stay memoised."""
    from repro import reward

    monkeypatch.setattr(reward, "REWARD_TIMEOUT_S", SHORT_LIMIT, raising=False)
    monkeypatch.setattr(reward, "REWARD_INNER_TIMEOUT_S", INNER_S, raising=False)  # only the hard limit is in time
    reward.clear_cache()
    try:
        # start-up (spawn + imports) is not charged to an item: warm the worker first
        assert _in_thread(lambda: compute_score("t", r"\boxed{7}", "7")) == 1.0
        pool = reward._shared_grader()
        assert (pool.worker_calls, pool.worker_starts) == (1, 1)
        before = reward.STATS["timeout"]
        assert _in_thread(lambda: compute_score("t", PATHOLOGICAL, "1")) == 0.0
        assert reward.STATS["timeout"] == before + 1
        # stopped by the hard limit, not by math-verify's 5 s alarm (an answer the worker would have sent): the
        # worker never reported the item and was killed (see SHORT_LIMIT)
        assert pool.worker_calls == 1 and not pool._workers[0].alive()
        # the normal case stays cheap: a repeated answer is a memo hit, in any thread
        judged = reward._shared_grader().worker_calls
        for _ in range(3):
            assert _in_thread(lambda: compute_score("t", r"so \boxed{7}", "7")) == 1.0
        assert compute_score("t", r"\boxed{7}", "7") == 1.0
        assert reward._shared_grader().worker_calls == judged
        assert _in_thread(lambda: compute_score("t", r"\boxed{8}", "7")) == 0.0  # still grading
        assert (pool.worker_calls, pool.worker_starts) == (2, 2)  # on a replacement worker
    finally:
        reward.clear_cache()
