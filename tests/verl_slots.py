"""At most two verl rehearsals at a time across the suite's xdist workers.

A tiny-arith run through verl's real trainer holds about 8 GB while it trains (ten Python processes: Ray's
actors, verl's FSDP worker, TransferQueue, the reward loop, vLLM's engine with its KV cache), a SmolLM2 run
about 12 GB. Three at once (one per worker) ran the 24 GB machine into Ray's memory monitor, which killed a
run's workers (CI of 2026-12-03). Two cores gain nothing from a third concurrent run anyway. A run takes one
slot, SmolLM2's takes both; the slots are lock files under the session's base folder, released by the kernel
when the holder dies, so a killed test frees its slot. A test's subprocess timeout starts once it holds its
slots, so waiting for a slot never counts against a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

SLOTS = 2
FOLDER_ENV = "REPRO_TEST_SLOTS"  # set by conftest in the controller, inherited by the workers


def _folder() -> Path:
    folder = Path(os.environ.get(FOLDER_ENV) or "/tmp/repro-test-slots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def verl_slots(units: int = 1) -> Iterator[None]:
    """Hold `units` of the SLOTS for the duration of the block (a verl run, or a kill and its resume)."""
    assert 1 <= units <= SLOTS
    files = [open(_folder() / f"slot-{i}", "a+") for i in range(SLOTS)]  # noqa: SIM115 (closed below)
    held: list = []
    try:
        if units == SLOTS:  # every slot, in order: a blocking wait on each
            for f in files:
                fcntl.flock(f, fcntl.LOCK_EX)
                held.append(f)
        else:
            while len(held) < units:
                for f in files:
                    if f in held:
                        continue
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    held.append(f)
                    if len(held) == units:
                        break
                else:
                    time.sleep(1.0)
        yield
    finally:
        for f in files:
            f.close()  # closing drops the lock
