"""The evaluation stage of a sweep, without training anything: `eval:` parsing, the command every launcher
runs, when a cell's evaluation counts as done, and the state `repro status` shows for each situation."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from repro.cli import main
from repro.errors import ReproError
from repro.launch.eval_stage import (
    EVAL_JOBS,
    eval_argv,
    eval_done,
    eval_running,
    eval_state,
    render_eval_script,
    wanted_steps,
)
from repro.launch.slurm_options import SlurmOptions
from repro.sweep import EvalSpec, load_sweep

ROOT = Path(__file__).resolve().parents[1]
NAME = "tiny-arith__grpo-n4__standard__s0"
TIERS = ("tiny-math500", "tiny-minerva", "tiny-olympiad", "tiny-aime")


def _sweep(tmp_path: Path, eval_block: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text("backbones: [tiny-arith]\nmethods: [grpo-n4]\nprompt_sets: [standard]\n" + eval_block)
    return path


def test_shipped_sweeps_ask_for_the_papers_evaluation() -> None:
    for name in ("paper", "paper-hard", "tiny", "tiny-hard", "tiny-verl", "tiny-verl-pipeline"):
        spec = load_sweep(ROOT / "sweeps" / f"{name}.yaml").eval
        assert spec == EvalSpec(benchmarks="all", k=32, checkpoints="all", grading="released", time=spec.time), name


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("", None),
        ("eval: false\n", None),
        ("eval: true\n", EvalSpec()),
        ("eval: {k: 4, checkpoints: [50, 100], benchmarks: [math500, aime_like]}\n", None),
    ],
)
def test_eval_section_parses(tmp_path, block, expected) -> None:
    spec = load_sweep(_sweep(tmp_path, block)).eval
    if "[50, 100]" in block:
        assert (spec.k, spec.checkpoints, spec.benchmarks) == (4, "50,100", "math500,aime_like")
        assert spec.eval_args() == [
            "--benchmarks", "math500,aime_like", "--k", "4", "--checkpoints", "50,100", "--grading", "released",
        ]  # fmt: skip
    else:
        assert spec == expected


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("eval: {k: 0}\n", "eval.k must be a positive integer"),
        ("eval: {checkpoints: latest}\n", "eval.checkpoints must be final, all or a list of steps"),
        ("eval: {grading: strict}\n", "eval.grading must be released or math-verify"),
        ("eval: {kk: 3}\n", "unknown eval options ['kk']"),
        ("eval: [1, 2]\n", "'eval' must be a mapping"),
        ("eval: {time: soon}\n", "is not a Slurm time"),
    ],
)
def test_a_bad_eval_section_is_one_line_naming_the_file(tmp_path, block, message) -> None:
    with pytest.raises(ReproError) as err:
        load_sweep(_sweep(tmp_path, block))
    assert message in str(err.value) and "s.yaml" in str(err.value)


def _run(tmp_path: Path, steps=(10, 20, 30), state: str = "finished") -> Path:
    run = tmp_path / "runs" / NAME
    for step in steps:
        (run / "checkpoints" / f"global_step_{step}" / "model").mkdir(parents=True)
    (run / "checkpoints" / "global_step_5").mkdir()  # dropped by the trainer: no model, not kept
    (run / "status.json").write_text(json.dumps({"state": state, "attempts": []}))
    return run


def _summary(run: Path, step: int, k: int = 32, names=TIERS, weighted: float = 0.25, grading="released") -> None:
    folder = run / "eval" / f"global_step_{step}"
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"k": k, "grading_policy": grading, "weighted_average": weighted, "benchmarks": {n: {} for n in names}}
    (folder / "summary.json").write_text(json.dumps(summary))


def test_done_needs_every_wanted_checkpoint_with_the_asked_k_benchmarks_and_grading(tmp_path) -> None:
    run = _run(tmp_path)
    spec = EvalSpec()
    assert wanted_steps(run, spec) == [10, 20, 30]
    assert wanted_steps(run, EvalSpec(checkpoints="final")) == [30]
    assert wanted_steps(run, EvalSpec(checkpoints="20,30")) == [20, 30]
    assert eval_done(run, spec) == (False, None, (10, 20, 30))
    _summary(run, 10)
    _summary(run, 20)
    _summary(run, 30, weighted=0.4)
    assert eval_done(run, spec) == (True, 0.4, (10, 20, 30))
    assert eval_done(run, EvalSpec(k=8))[0] is False  # another k: not what this sweep asked for
    assert eval_done(run, EvalSpec(grading="math-verify"))[0] is False
    _summary(run, 30, names=TIERS[:2])  # a summary of two tiers only
    assert eval_done(run, spec)[0] is False
    assert eval_done(run, EvalSpec(benchmarks="tiny-math500,tiny-minerva", checkpoints="final"))[0] is True


def test_states_from_the_folder_and_the_job_records(tmp_path) -> None:
    spec = EvalSpec(checkpoints="final")
    assert eval_state(tmp_path / "nothing", spec, "pending").state == "pending"
    assert eval_state(tmp_path / "nothing", None, "pending").state == "off"
    run = _run(tmp_path)
    assert eval_state(run, spec, "finished").state == "pending"  # trained, never evaluated
    assert eval_state(run, spec, "failed").state == "not started"
    # a local evaluation that failed: its log's last line and path are the reason
    log = tmp_path / "eval.err"
    log.write_text("Traceback ...\nerror: out of memory\n")
    record = {"launcher": "local", "job_id": "pid-1", "exit_code": 3, "log": str(log)}
    (run / EVAL_JOBS).write_text(json.dumps(record) + "\n")
    failed = eval_state(run, spec, "finished")
    assert failed.state == "failed" and "error: out of memory" in failed.reason and str(log) in failed.reason
    assert eval_state(run, spec, "running").state == "pending"  # trained again: waits for the new training
    # a job that succeeded on fewer checkpoints than the sweep asks (the main job's --eval-checkpoints final
    # against a sweep file's `checkpoints: all`) is partial, not failed: it names what it evaluated
    _summary(run, 30, weighted=0.125)
    (run / EVAL_JOBS).write_text(json.dumps({**record, "exit_code": 0}) + "\n")
    partial = eval_state(run, EvalSpec(), "finished")
    assert (partial.state, partial.steps) == ("partial", (30,)), partial
    assert "checkpoints 30 of the 3 this sweep asks for" in partial.reason and "repro sweep eval" in partial.reason
    done = eval_state(run, spec, "finished")
    assert (done.state, done.weighted, done.steps) == ("done", 0.125, (30,))
    # a live `repro eval` holds RUN/eval/.eval.lock
    fd = os.open(run / "eval" / ".eval.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert eval_running(run) and eval_state(run, spec, "finished").state == "running"
    finally:
        os.close(fd)
    assert not eval_running(run)


def test_every_launcher_runs_the_same_repro_eval_and_the_slurm_script_says_so(tmp_path) -> None:
    run = tmp_path / NAME
    spec = EvalSpec(k=8, checkpoints="final", shards=2)
    argv = eval_argv(run, spec, "python")
    assert argv == ["python", "-m", "repro.cli", "eval", str(run), "--benchmarks", "all", "--k", "8",
                    "--checkpoints", "final", "--grading", "released", "--shards", "2"]  # fmt: skip
    text = render_eval_script(
        run, NAME, spec, SlurmOptions(account="acct"), gpus=8, sweep_name="paper", project_dir=ROOT
    )
    assert "#SBATCH --gpus-per-node=8" in text and "#SBATCH --account=acct" in text
    assert "#SBATCH --time=12:00:00" in text and f"#SBATCH --output={run}/slurm/eval-%j.out" in text
    assert "-m repro.cli \\\n    eval" in text and "--checkpoints \\\n    final" in text


def test_status_shows_the_evaluation_state_per_cell(tmp_path, capsys) -> None:
    sweep = _sweep(tmp_path, "eval: {checkpoints: final}\n")
    run = _run(tmp_path)
    capsys.readouterr()
    assert main(["status", "--sweep", str(sweep), "--runs-root", str(run.parent), "--no-scheduler"]) == 0
    out = capsys.readouterr().out
    assert "pending" in out and "evaluation: 1 pending" in out, out
    _summary(run, 30, weighted=0.3125)
    assert main(["status", "--sweep", str(sweep), "--runs-root", str(run.parent), "--no-scheduler"]) == 0
    out = capsys.readouterr().out
    assert "done 31.2%" in out and "evaluation: 1 done" in out, out


def test_sweep_eval_without_an_eval_section_is_one_line(tmp_path, capsys) -> None:
    sweep = _sweep(tmp_path, "")
    assert main(["sweep", "eval", str(sweep), "--runs-root", str(tmp_path / "runs")]) == 2
    assert "has no 'eval:' section" in capsys.readouterr().err


def test_a_cell_another_sweep_holds_is_not_evaluated_twice(tmp_path, monkeypatch) -> None:
    """Two sweeps that both find a cell trained and not yet evaluated (one just trained it, the other reached
    it after) used to start its evaluation both, and the second failed on the first's lock. The evaluation
    takes the cell's launch lock as training does: held elsewhere, it is "running elsewhere", not a failure;
    evaluated meanwhile, it is "done"; free, it runs."""
    from repro.launch import eval_stage, local

    sweep = load_sweep(_sweep(tmp_path, "eval:\n  k: 2\n  checkpoints: final\n"))
    cell = sweep.cells()[0]
    root = tmp_path / "runs"
    (root / cell.name).mkdir(parents=True)
    done = {"now": False}
    ran: list[str] = []
    monkeypatch.setattr(local, "_run_state", lambda path: "finished")
    monkeypatch.setattr(eval_stage, "eval_done", lambda path, spec: (done["now"], []))
    monkeypatch.setattr(eval_stage, "eval_running", lambda path: False)
    monkeypatch.setattr(eval_stage, "run_local_eval", lambda path, *a, **k: ran.append(path.name) or (0, ""))

    def evaluate() -> local.CellOutcome:
        outcome = local.CellOutcome(cell, cell.name, "skipped", message="already finished")
        local._evaluate(outcome, sweep, root, "python", 1)
        return outcome

    with local.claim_cell(root, cell.name) as fd:  # the other sweep, between its training and its evaluation
        assert fd is not None
        held = evaluate()
    assert (held.eval_outcome, held.eval_message) == ("running elsewhere", "another sweep holds its launch lock")
    assert ran == []
    free = evaluate()
    assert free.eval_outcome == "finished" and ran == [cell.name]
    done["now"] = True
    assert evaluate().eval_outcome == "done" and ran == [cell.name]
