"""Pause points (repro.rundir.pause): a run held at a named moment fires once per folder, is let go by its release
file, by a signal handler, by its caller's condition or after its time bound, and costs nothing unasked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.rundir.pause import PAUSE_ENV, PAUSE_SECONDS_ENV, pause_at, pause_file, release

HOLD = """
import sys
from repro.rundir.pause import pause_at
def stop(*_):
    raise SystemExit(7)
import signal
signal.signal(signal.SIGTERM, stop)
print(pause_at(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None), flush=True)
"""


def _hold(run: Path, moment: str, *step: str, env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, PAUSE_ENV: "start,step:2,save:4", **(env or {})}
    return subprocess.Popen([sys.executable, "-c", HOLD, str(run), moment, *step], env=env, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip


def _until(path: Path) -> None:
    deadline = time.monotonic() + 60  # a guard against a hang, not a timing the test relies on
    while not path.exists():
        assert time.monotonic() < deadline, path
        time.sleep(0.02)


def test_unasked_or_other_moments_do_not_pause(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(PAUSE_ENV, raising=False)
    assert pause_at(tmp_path, "start") is False and not (tmp_path / ".pauses").exists()
    monkeypatch.setenv(PAUSE_ENV, "start,step:2")
    assert pause_at(tmp_path, "step", 3) is False and pause_at(tmp_path, "save", 2) is False
    assert pause_at(tmp_path, "end") is False and not (tmp_path / ".pauses").exists()


def test_a_pause_waits_for_its_release_and_fires_once_per_folder(tmp_path) -> None:
    proc = _hold(tmp_path, "step", "2")
    _until(pause_file(tmp_path, "step", 2))
    record = json.loads(pause_file(tmp_path, "step", 2).read_text())
    assert record["pid"] == proc.pid and proc.poll() is None  # written by the paused process, still there
    release(tmp_path, "step", 2)
    out, _ = proc.communicate(timeout=60)
    assert (proc.returncode, out.strip()) == (0, "True")
    again = _hold(tmp_path, "step", "2")  # the next allocation of the same job: the moment has fired
    out, _ = again.communicate(timeout=60)
    assert (again.returncode, out.strip()) == (0, "False")


def test_a_signal_ends_the_pause_through_its_handler(tmp_path) -> None:
    proc = _hold(tmp_path, "start")
    _until(pause_file(tmp_path, "start"))
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 7  # the handler's exception, raised inside the wait


def test_the_callers_condition_and_the_time_bound_end_a_pause(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(PAUSE_ENV, "save:4,start")
    asked = iter([False, False, True])
    assert pause_at(tmp_path, "save", 4, go_on=lambda: next(asked)) is True
    monkeypatch.setenv(PAUSE_SECONDS_ENV, "0")  # nobody ends it: it gives up, the run goes on
    assert pause_at(tmp_path, "start") is True
    assert sorted(p.name for p in (tmp_path / ".pauses").iterdir()) == ["save-4", "start"]


@pytest.mark.parametrize("moment", ["start", "step", "save", "end", "eval"])
def test_every_moment_the_code_pauses_at_is_named(moment) -> None:
    from repro.rundir.pause import MOMENTS

    assert moment in MOMENTS
    root = Path(__file__).resolve().parents[1] / "repro"
    calls = [p for p in root.rglob("*.py") if "pause_at(" in p.read_text() and f'"{moment}"' in p.read_text()]
    assert calls, f"no pause_at({moment!r}) in repro/"
