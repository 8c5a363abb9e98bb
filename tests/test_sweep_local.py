"""The local sweep launcher: every cell once, finished cells skipped, concurrent sweeps split the work,
failures reported per cell, and `repro status` reading states from the run folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import typer

from repro.cli import main
from repro.commands import sweep as sweep_commands
from repro.errors import ReproError
from repro.launch.local import run_local
from repro.rundir import RunDir, cell_name
from repro.sweep import load_sweep

ARGS = ["--steps", "2", "--batch", "8"]
METHODS = ("grpo-n4", "seq-pos")
NAMES = [cell_name("tiny-arith", m, "standard", 0) for m in METHODS]
ROOT = Path(__file__).resolve().parents[1]


def _sweep_file(tmp_path: Path, methods=METHODS) -> Path:
    path = tmp_path / "mini.yaml"
    path.write_text(
        f"name: mini\nbackbones: [tiny-arith]\nmethods: [{', '.join(methods)}]\nprompt_sets: [standard]\nseeds: [0]\n"
    )
    return path


def _attempts(run: Path) -> list[dict]:
    return json.loads((run / "status.json").read_text())["attempts"]


def _record(root: Path, name: str) -> dict:
    return json.loads((root / ".launch" / f"{name}.json").read_text())


def _cli(argv: list[str]) -> int:
    """The two commands wired as repro/cli.py wires them."""
    app = typer.Typer()
    app.add_typer(sweep_commands.app, name="sweep")
    app.command("status")(sweep_commands.status)
    result = app(args=argv, prog_name="repro", standalone_mode=False)
    return result if isinstance(result, int) else 0


def test_sweep_runs_every_cell_then_skips_them(tiny_env, tmp_path) -> None:
    sweep = load_sweep(_sweep_file(tmp_path))
    root = tmp_path / "runs"
    report = run_local(sweep, root, max_parallel=2, extra_args=ARGS)
    assert [o.outcome for o in report.outcomes] == ["finished", "finished"], report.outcomes
    assert [o.name for o in report.outcomes] == NAMES and report.ok
    records = {}
    for name in NAMES:
        assert RunDir(root / name).state == "finished"
        assert len(_attempts(root / name)) == 1
        records[name] = _record(root, name)
        assert records[name]["launcher"] == "local" and records[name]["exit_code"] == 0
        assert records[name]["pid"] == next(o.pid for o in report.outcomes if o.name == name)
        assert records[name]["pid"] == _attempts(root / name)[-1]["pid"]  # the process that ran the cell
        assert records[name]["started"] <= records[name]["ended"]
        assert "--steps" in records[name]["argv"] and "repro.cli" in records[name]["argv"]

    again = run_local(sweep, root, max_parallel=2, extra_args=ARGS)
    assert [o.outcome for o in again.outcomes] == ["skipped", "skipped"]
    assert again.launched == [] and again.ok
    for name in NAMES:
        assert _record(root, name) == records[name]  # no new launch record
        assert len(_attempts(root / name)) == 1


def test_two_concurrent_sweeps_launch_each_cell_once(tiny_env, tmp_path) -> None:
    sweep = load_sweep(_sweep_file(tmp_path))
    root = tmp_path / "runs"
    barrier = threading.Barrier(2)
    reports = []

    def go() -> None:
        barrier.wait()
        reports.append(run_local(sweep, root, max_parallel=2, extra_args=ARGS))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(reports) == 2
    for name in NAMES:
        outcomes = sorted(o.outcome for r in reports for o in r.outcomes if o.name == name)
        launched = [o for r in reports for o in r.outcomes if o.name == name and o.launched]
        assert len(launched) == 1, outcomes
        assert outcomes[0] == "finished" and outcomes[1] in ("running elsewhere", "skipped"), outcomes
        assert len(_attempts(root / name)) == 1
        assert RunDir(root / name).state == "finished"
        assert _record(root, name)["pid"] == launched[0].pid


def test_failed_cell_is_reported_and_the_others_still_run(tiny_env, tmp_path, capsys) -> None:
    root = tmp_path / "runs"
    junk = root / NAMES[1]  # a folder that is not a run: `repro run` refuses it with exit 2
    junk.mkdir(parents=True)
    (junk / "notes.txt").write_text("mine")
    sweep = load_sweep(_sweep_file(tmp_path))
    report = run_local(sweep, root, max_parallel=1, extra_args=ARGS)
    ok, bad = report.outcomes
    assert ok.outcome == "finished" and RunDir(root / NAMES[0]).state == "finished"
    assert bad.outcome == "failed" and bad.exit_code == 2 and not report.ok
    assert bad.message.startswith("error: ") and "not a repro run directory" in bad.message
    assert _record(root, NAMES[1])["exit_code"] == 2

    # through the command: a bad --batch fails every cell fast; exit 1 and the reason in the table
    fresh = tmp_path / "fresh"
    code = _cli(["sweep", "run", str(_sweep_file(tmp_path)), "--runs-root", str(fresh), "--steps", "2", "--batch", "6"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.count("failed") >= 2 and "must be a multiple" in out
    assert "0 finished, 2 failed" in out


def test_status_shows_pending_finished_failed(tmp_path, capsys) -> None:
    root = tmp_path / "runs"
    methods = ("grpo-n4", "seq-pos", "est")
    names = [cell_name("tiny-arith", m, "standard", 0) for m in methods]
    done = RunDir.prepare(root / names[0], {"x": 1}, ["repro", "run"])
    done.begin_attempt()
    done.end_attempt("finished")
    bad = RunDir.prepare(root / names[1], {"x": 2}, ["repro", "run"])
    bad.begin_attempt()
    bad.end_attempt("failed", "RuntimeError: loss is NaN at step 3")

    assert _cli(["status", "--runs-root", str(root), "--sweep", str(_sweep_file(tmp_path, methods))]) == 0
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if "tiny-arith__" in line}
    assert "finished" in lines[names[0]]
    assert "failed" in lines[names[1]] and "RuntimeError: loss is NaN at step 3" in lines[names[1]]
    assert "pending" in lines[names[2]]

    assert _cli(["status", "--runs-root", str(root)]) == 0  # without --sweep: only existing runs
    out = capsys.readouterr().out
    assert names[0] in out and names[1] in out and names[2] not in out


def test_missing_sweep_file(tmp_path) -> None:
    with pytest.raises(ReproError, match="does not exist"):
        _cli(["sweep", "run", str(tmp_path / "nope.yaml")])


def _alive(pid: int) -> bool:
    """Running, or stopped: not gone and not a zombie its parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _steps(run: Path) -> list[int]:
    return sorted(
        json.loads(line)["step"]
        for f in (run / "metrics").glob("attempt-*.jsonl")
        for line in f.read_text().splitlines()
    )


@pytest.mark.heavy
def test_killed_sweep_resumes_and_retry_failed_relaunches_only_the_interrupted_cell(tiny_env, tmp_path, capsys) -> None:
    """SIGKILL the whole sweep (launcher and cell) mid-cell; retry-failed resumes that cell only, without
    losing or repeating a step, and the next `sweep run` does the cell that never started."""
    steps = 12
    sweep_file = _sweep_file(tmp_path, ("est", "grpo-n4"))
    root = tmp_path / "runs"
    est, grpo = (root / cell_name("tiny-arith", m, "standard", 0) for m in ("est", "grpo-n4"))
    common = ["--runs-root", str(root), "--steps", str(steps), "--batch", "8", "--max-parallel", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "repro.cli", "sweep", "run", str(sweep_file), *common],
        cwd=ROOT,
        env=tiny_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline and len(_steps(est) if (est / "metrics").exists() else []) < 4:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    cell_pid = json.loads((est / "status.json").read_text())["attempts"][-1]["pid"]
    while time.time() < deadline and Path(f"/proc/{cell_pid}").exists():  # the cell dies a moment later
        time.sleep(0.1)
    first = _steps(est)
    assert 4 <= len(first) < steps and not grpo.exists()
    capsys.readouterr()
    assert main(["status", "--runs-root", str(root), "--sweep", str(sweep_file)]) == 0
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if "tiny-arith__" in line}
    assert "interrupted" in rows[est.name] and "pending" in rows[grpo.name]

    assert main(["sweep", "retry-failed", str(sweep_file), *common]) == 0
    assert RunDir(est).state == "finished" and not grpo.exists()  # pending cells are not retried
    assert _steps(est) == list(range(1, steps + 1))  # every step exactly once
    attempts = json.loads((est / "status.json").read_text())["attempts"]
    assert [a["state"] for a in attempts] == ["interrupted", "finished"]

    assert main(["sweep", "run", str(sweep_file), *common]) == 0
    assert RunDir(grpo).state == "finished" and len(json.loads((est / "status.json").read_text())["attempts"]) == 2


@pytest.mark.heavy
def test_a_sigterm_interrupts_the_cell_and_the_next_sweep_resumes_it_to_the_straight_runs_weights(
    tiny_env, tmp_path
) -> None:
    """A machine shutting down (or the sweep's process group killed) sends SIGTERM to the sweep and to its cells'
    `repro run`. The test picks the moment: once the cell has logged step 2 it freezes the whole group (SIGSTOP),
    sends the TERM and lets the group go on, so the TERM lands in the step after (its update or its save) and the
    cell cannot finish first. The attempt is recorded interrupted; the same sweep command again resumes the cell
    from its last checkpoint, and it ends bit-identical to the cell trained straight through."""
    import torch
    from safetensors.torch import load_file

    from repro.arithmetic import usable_cores
    from repro.launch.attempt import THREADS_ENV
    from repro.launch.state import cell_state
    from repro.launch.warm import enabled
    from repro.rundir.attempts import last_logged_step

    steps = 8  # six steps of slack after the moment the test waits for
    sweep_file = _sweep_file(tmp_path, ("grpo-n4",))
    root = tmp_path / "runs"
    run = root / NAMES[0]
    common = ["--runs-root", str(root), "--steps", str(steps), "--batch", "8", "--max-parallel", "1"]
    straight_dir = tmp_path / "straight"
    straight = subprocess.Popen(  # the reference, with the torch threads the launcher gives its one cell
        [sys.executable, "cli.py", "run", "--model", "tiny-arith", "--method", "grpo-n4", "--steps", str(steps),
         "--batch", "8", "--run-dir", str(straight_dir)],
        cwd=ROOT, env={**tiny_env, THREADS_ENV: str(usable_cores())}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "repro.cli", "sweep", "run", str(sweep_file), *common],
        cwd=ROOT,
        env=tiny_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the sweep and its cell: one process group, as a shell's job is
    )
    metrics = run / "metrics" / "attempt-001.jsonl"
    deadline = time.monotonic() + 300  # a failure guard: the test acts as soon as step 2 is logged
    while (last_logged_step(metrics) or 0) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, "the cell never logged step 2"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGSTOP)  # the sweep and the cell stand still where they are,
    os.killpg(proc.pid, signal.SIGTERM)  # get the shutdown's TERM,
    os.killpg(proc.pid, signal.SIGCONT)  # and take it from there
    proc.wait(timeout=60)
    cell_pid = _attempts(run)[-1]["pid"]
    worker = _record(root, NAMES[0]).get("warm_worker")  # the cell was forked from a warm worker (repro.launch.warm)
    assert bool(worker) == enabled() and _record(root, NAMES[0])["pid"] == cell_pid
    while _alive(cell_pid) or (worker and _alive(worker)):  # the cell records its attempt and exits; its worker too
        assert time.monotonic() < deadline, "the cell or its warm worker outlived the SIGTERM"
        time.sleep(0.05)
    (attempt,) = _attempts(run)
    stopped_at = last_logged_step(metrics)
    assert attempt["state"] == "interrupted" and attempt["error"].startswith("stopped by a signal"), attempt
    assert stopped_at is not None and 2 <= stopped_at < steps
    assert cell_state(run).state == "interrupted"  # what `repro status` shows

    assert main(["sweep", "run", str(sweep_file), *common]) == 0  # the same command again
    first, second = _attempts(run)
    assert (first["state"], second["state"]) == ("interrupted", "finished")
    assert second["resumed_from_step"] in (stopped_at, stopped_at + 1)  # + 1: the TERM came after that step's save
    assert _steps(run) == list(range(1, steps + 1))  # every step once
    assert straight.wait(timeout=300) == 0, straight.stderr.read()[-2000:]
    final = f"checkpoints/global_step_{steps}/model/model.safetensors"
    a, b = load_file(run / final), load_file(straight_dir / final)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
