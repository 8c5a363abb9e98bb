"""The suite's verl slots (tests/verl_slots.py) bound how many verl runs hold memory at once."""

from __future__ import annotations

import threading
import time

import pytest
from verl_slots import SLOTS, verl_slots

HANG_GUARD_S = 120.0  # only a failure guard: a wait for something that must happen ends as soon as it does
NEGATIVE_S = 1.5  # how long a run that must wait is watched not to start: a correct lock passes however slow


def _acquire_in_thread(units: int) -> tuple[threading.Thread, threading.Event, threading.Event]:
    got, done = threading.Event(), threading.Event()

    def hold() -> None:
        with verl_slots(units):
            got.set()
            done.wait(HANG_GUARD_S)  # held until the test says so (not for a fixed time the test must beat)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread, got, done


def test_a_run_waits_while_every_slot_is_held_and_starts_once_one_frees(tmp_path, monkeypatch) -> None:
    """Holders keep their slots until the test releases them, and every wait for a run that must start is a
    hang guard, so no outcome depends on the machine's speed. A run that must wait is watched for NEGATIVE_S:
    with a correct lock it cannot start however long it is watched, so a slow machine cannot fail that."""
    monkeypatch.setenv("REPRO_TEST_SLOTS", str(tmp_path))
    assert SLOTS == 2
    first, got_first, done_first = _acquire_in_thread(1)
    second, got_second, done_second = _acquire_in_thread(1)
    assert got_first.wait(HANG_GUARD_S) and got_second.wait(HANG_GUARD_S)  # two runs at once
    third, got_third, done_third = _acquire_in_thread(1)
    assert not got_third.wait(NEGATIVE_S)  # a third waits
    done_first.set()
    first.join(HANG_GUARD_S)
    assert got_third.wait(HANG_GUARD_S)  # ...until one ends
    big, got_big, done_big = _acquire_in_thread(SLOTS)
    assert not got_big.wait(NEGATIVE_S)  # the two-slot run waits for both
    done_second.set()
    second.join(HANG_GUARD_S)
    assert not got_big.wait(NEGATIVE_S)  # one is still held
    done_third.set()
    assert got_big.wait(HANG_GUARD_S)
    done_big.set()
    for thread in (second, third, big):
        thread.join(HANG_GUARD_S)
        assert not thread.is_alive()


def test_a_run_cannot_ask_for_more_slots_than_there_are(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_TEST_SLOTS", str(tmp_path))
    with pytest.raises(AssertionError), verl_slots(SLOTS + 1):
        time.sleep(0)
