"""The suite's verl slots (tests/verl_slots.py) bound how many verl runs hold memory at once."""

from __future__ import annotations

import threading
import time

import pytest
from verl_slots import SLOTS, verl_slots


def _acquire_in_thread(units: int) -> tuple[threading.Thread, threading.Event, threading.Event]:
    got, done = threading.Event(), threading.Event()

    def hold() -> None:
        with verl_slots(units):
            got.set()
            done.wait(10)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread, got, done


def test_a_run_waits_while_every_slot_is_held_and_starts_once_one_frees(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_TEST_SLOTS", str(tmp_path))
    assert SLOTS == 2
    first, got_first, done_first = _acquire_in_thread(1)
    second, got_second, done_second = _acquire_in_thread(1)
    assert got_first.wait(5) and got_second.wait(5)  # two runs at once
    third, got_third, done_third = _acquire_in_thread(1)
    assert not got_third.wait(2.5)  # a third waits
    done_first.set()
    first.join(5)
    assert got_third.wait(5)  # ...until one ends
    big, got_big, done_big = _acquire_in_thread(SLOTS)
    assert not got_big.wait(2.5)  # the two-slot run waits for both
    done_second.set()
    assert not got_big.wait(1.5)  # one is still held
    done_third.set()
    assert got_big.wait(5)
    done_big.set()
    for thread in (second, third, big):
        thread.join(5)


def test_a_run_cannot_ask_for_more_slots_than_there_are(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_TEST_SLOTS", str(tmp_path))
    with pytest.raises(AssertionError), verl_slots(SLOTS + 1):
        time.sleep(0)
