"""Warm workers (repro.launch.warm): a process forked from a worker that has done the imports starts as the cold
`subprocess.Popen` process would (argv, environment, fds, signals, streams, global generators seeded anew and
unused), reports the same exit codes, and a sweep's cells and evaluations run through them write what they write
cold; without a worker the launcher starts processes cold, with one warning line."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.launch import warm
from repro.launch.local import run_local
from repro.rundir import cell_name
from repro.sweep import load_sweep

ARGS = ["--steps", "2", "--batch", "8"]
NAME = cell_name("tiny-arith", "grpo-n4", "standard", 0)

# What a process sees of how it was started; modes exit in the ways the launcher must tell apart.
PROBE = r"""
import json, os, signal, sys, threading, time
mode = sys.argv[1]
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "kill":
    if int(sys.argv[2]) == signal.SIGINT:  # Python's own handler, even where the test runner ignores SIGINT
        signal.signal(signal.SIGINT, signal.default_int_handler)  # (xdist's workers do; children inherit it)
    os.kill(os.getpid(), int(sys.argv[2]))
    time.sleep(5)
if mode == "raise":
    raise RuntimeError("the probe failed")
if mode == "sleep":
    time.sleep(float(sys.argv[2]))
    sys.exit(0)
import hashlib, logging, random
import numpy, torch
from rich.console import Console

def fds():
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if int(name) > 2 and not target.startswith("/proc/"):
            out[name] = [target, os.get_inheritable(int(name))]
    return out

def fresh(generator):  # seeded and never drawn from since
    state = torch.Generator().manual_seed(generator.initial_seed()).get_state()
    return state.numpy().tobytes() == generator.get_state().numpy().tobytes()

def stream(s):
    return [s.isatty(), s.line_buffering, s.encoding, s.errors, type(s.buffer).__name__]

console = Console()
mask = os.umask(0)
os.umask(mask)
caught = (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGHUP, signal.SIGCHLD, signal.SIGXFSZ, signal.SIGUSR1)
print(json.dumps({
    "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "name": __name__, "env": dict(os.environ),
    "torch_fresh": fresh(torch.default_generator), "torch_threads": torch.get_num_threads(),
    "signals": {s.name: str(signal.getsignal(s)) for s in caught},
    "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "threads": threading.active_count(), "stdout": stream(sys.stdout), "stderr": stream(sys.stderr),
    "stdin": os.readlink("/proc/self/fd/0"), "console": [console.width, console.is_terminal, console.color_system],
    "pgrp": os.getpgrp(), "umask": mask, "fds": fds(), "root_handlers": len(logging.getLogger().handlers),
    "main": [getattr(getattr(sys.modules["__main__"], "__spec__", None), a, None) for a in ("name", "origin")],
    "draws": [int(numpy.random.randint(2**31)), random.random(), torch.initial_seed()],
}))
print("to stderr", file=sys.stderr)
"""


def _probe(tmp_path: Path) -> Path:
    path = tmp_path / "probe" / "probe.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(PROBE)
    return path


def _start(workers, argv, logs: Path, tag: str, env, pass_fds=(), preload=()):
    """One process, warm (`workers`) or cold (None); returns (its exit code, stdout, stderr, the process)."""
    logs.mkdir(exist_ok=True)
    with open(logs / f"{tag}.out", "wb") as out, open(logs / f"{tag}.err", "wb") as err:
        if workers is None:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=tuple(pass_fds), env=env
            )
        else:
            proc = workers.popen(argv, stdout=out, stderr=err, env=env, pass_fds=pass_fds, preload=preload)
        code = proc.wait()
    return code, (logs / f"{tag}.out").read_text(), (logs / f"{tag}.err").read_text(), proc


def test_a_warm_process_starts_as_a_cold_one_would(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(_probe(tmp_path).parent)  # `python -m probe`, as the launcher runs `python -m repro.cli`
    env = {**os.environ, "REPRO_LAUNCHER": "local", "REPRO_TORCH_THREADS": "1"}
    lock = os.open(tmp_path / "cell.lock", os.O_RDWR | os.O_CREAT)  # the launch lock the launcher passes on
    argv = [sys.executable, "-m", "probe", "report", "--flag", "two words"]
    seen = {}
    with warm.WarmWorkers(tmp_path / "launch") as workers:
        for tag, by in (("cold", None), ("warm", workers), ("warm2", workers)):
            code, out, err, proc = _start(
                by, argv, tmp_path / "logs", tag, env, (lock,), warm.PRELOAD[("repro.cli", "run")]
            )
            assert code == 0 and err == "to stderr\n", (tag, code, err)
            seen[tag] = json.loads(out)
            assert isinstance(proc, warm.WarmProcess) == (by is not None)
            if by is not None:
                assert proc.worker_pid and proc.worker_pid != proc.pid and not Path(f"/proc/{proc.pid}").exists()
    os.close(lock)
    cold, hot, hot2 = seen["cold"], seen["warm"], seen["warm2"]
    draws = [cold.pop("draws"), hot.pop("draws"), hot2.pop("draws")]
    assert all(draws[i][j] != draws[k][j] for i, k in ((0, 1), (1, 2)) for j in (0, 1, 2)), draws  # seeded anew
    assert cold["torch_fresh"]
    assert str(lock) in cold["fds"] and cold["fds"][str(lock)][1]  # kept at its number, inheritable
    assert hot == cold, {k: (cold.get(k), hot.get(k)) for k in cold.keys() | hot.keys() if cold.get(k) != hot.get(k)}
    assert hot2 == cold
    assert cold["main"][0] == "probe" and cold["argv"][0] == cold["main"][1]
    assert "imported" in (tmp_path / "launch" / "warm-report.log").read_text()


@pytest.mark.parametrize(
    ("args", "code", "last"),
    [
        (["exit", "3"], 3, ""),
        (["exit", "0"], 0, ""),
        (["raise"], 1, "RuntimeError: the probe failed"),
        (["kill", "9"], -9, ""),
        (["kill", "15"], -15, ""),
        (["kill", "2"], -2, "KeyboardInterrupt"),  # Python's own handler: the traceback, then death by SIGINT
    ],
)
def test_exit_codes_are_reported_as_subprocess_reports_them(tmp_path, args, code, last) -> None:
    argv = [sys.executable, str(_probe(tmp_path)), *args]
    with warm.WarmWorkers(tmp_path / "launch") as workers:
        for by in (None, workers):
            got, _, err, proc = _start(by, argv, tmp_path / "logs", "x", dict(os.environ))
            lines = [line for line in err.splitlines() if line.strip()]
            assert got == code and (lines[-1] if lines else "") == last, (by, got, err)
            assert isinstance(proc, warm.WarmProcess) == (by is not None)


def test_a_dead_worker_leaves_its_child_running_and_the_next_process_starts_cold(tmp_path, capsys) -> None:
    argv = [sys.executable, str(_probe(tmp_path)), "sleep", "2"]
    with warm.WarmWorkers(tmp_path / "launch") as workers:
        with open(tmp_path / "a.out", "wb") as out:
            proc = workers.popen(argv, stdout=out, stderr=out, env=dict(os.environ), preload=())
            os.kill(proc.worker_pid, signal.SIGKILL)
            started = time.monotonic()
            assert proc.wait() is None  # the exit code went with the worker,
            assert time.monotonic() - started > 1  # but the child was waited for
        code, _, _, cold = _start(workers, [*argv[:-1], "0"], tmp_path / "logs", "b", dict(os.environ))
    assert code == 0 and isinstance(cold, subprocess.Popen)
    err = capsys.readouterr().err
    assert err.count("warm workers unavailable") == 1 and "exited with -9" in err, err


def test_the_switch(monkeypatch) -> None:
    assert warm.enabled({})
    for off in ("0", "off", "no"):
        assert not warm.enabled({warm.WARM_ENV: off})


def _sweep(tmp_path: Path, eval_block: str = "") -> Path:
    path = tmp_path / "one.yaml"
    path.write_text(
        "name: one\nbackbones: [tiny-arith]\nmethods: [grpo-n4]\nprompt_sets: [standard]\nseeds: [0]\n" + eval_block
    )
    return path


def _files(run: Path) -> dict[str, str]:
    """The run folder's files by hash, the run's own path taken out, and without what a clock or a pid writes:
    status.json, eval-jobs.jsonl, the locks, and the stage timings in the metrics (each step's and each save's)."""
    found = {}
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        rel = str(path.relative_to(run))
        if rel in ("status.json", "run.lock", "eval-jobs.jsonl") or rel.endswith(".eval.lock"):
            continue
        data = path.read_bytes().replace(str(run.parent).encode(), b"ROOT")
        if rel.startswith("metrics/") or path.name == "metrics.json":
            rows = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
            for row in rows:
                row["data"] = {k: v for k, v in row["data"].items() if not k.startswith("timing_s/")}
                row.pop("time", None)
            data = json.dumps(rows, sort_keys=True).encode()
        found[rel] = hashlib.sha256(data).hexdigest()
    return found


@pytest.mark.heavy
def test_a_cell_and_its_evaluation_write_the_same_files_warm_and_cold(tiny_env, tmp_path, monkeypatch) -> None:
    sweep = load_sweep(_sweep(tmp_path, "eval:\n  k: 2\n  checkpoints: final\n"))
    runs = {}
    for mode in ("0", "1"):
        monkeypatch.setenv(warm.WARM_ENV, mode)
        root = tmp_path / f"warm-{mode}"
        report = run_local(sweep, root, max_parallel=1, extra_args=ARGS)
        (outcome,) = report.outcomes
        assert outcome.outcome == "finished" and outcome.eval_outcome == "finished", outcome
        record = json.loads((root / ".launch" / f"{NAME}.json").read_text())
        attempts = json.loads((root / NAME / "status.json").read_text())["attempts"]
        assert record["pid"] == outcome.pid == attempts[-1]["pid"]  # the process that ran the cell
        assert ("warm_worker" in record) == (mode == "1")
        jobs = [json.loads(line) for line in (root / NAME / "eval-jobs.jsonl").read_text().splitlines()]
        assert jobs[-1]["exit_code"] == 0 and jobs[-1]["job_id"] == jobs[0]["job_id"], jobs
        runs[mode] = _files(root / NAME)
        assert "checkpoints/global_step_2/model/model.safetensors" in runs[mode]
        assert "eval/global_step_2/summary.json" in runs[mode]
        assert "finished" in (root / ".launch" / f"{NAME}.out").read_text()
    cold, hot = runs["0"], runs["1"]
    assert hot == cold, {k for k in cold.keys() | hot.keys() if cold.get(k) != hot.get(k)}


@pytest.mark.heavy
def test_a_sweep_whose_worker_cannot_start_runs_its_cells_cold(tiny_env, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(warm.WARM_ENV, "1")
    monkeypatch.setitem(warm.PRELOAD, ("repro.cli", "run"), ("repro.cli", "repro_no_such_module"))
    root = tmp_path / "runs"
    report = run_local(load_sweep(_sweep(tmp_path)), root, max_parallel=1, extra_args=ARGS)
    (outcome,) = report.outcomes
    assert outcome.outcome == "finished", outcome
    record = json.loads((root / ".launch" / f"{NAME}.json").read_text())
    assert "warm_worker" not in record and record["exit_code"] == 0
    err = capsys.readouterr().err
    assert err.count("warm workers unavailable") == 1 and "repro_no_such_module" in err, err
    assert "ModuleNotFoundError" in (root / ".launch" / "warm-run.log").read_text()
