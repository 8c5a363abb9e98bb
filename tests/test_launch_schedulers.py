"""The Slurm and Ray launchers against real schedulers on this machine (tests/clusters.py): tiny-arith
cells submitted, run and recorded; repeated and concurrent sweeps submit each cell once; cancel works."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from clusters import ray_cluster

from repro.cli import main
from repro.launch.jobs import job_records
from repro.launch.plan import CpuOptions
from repro.launch.ray_jobs import RayScheduler
from repro.launch.slurm import SlurmOptions, SlurmScheduler
from repro.launch.state import cell_state
from repro.rundir import RunDir, cell_name
from repro.sweep import load_sweep
from repro.sweep_submit import submit_sweep

ROOT = Path(__file__).resolve().parents[1]
SHORT = CpuOptions(steps=2, batch=8)


EVAL = "eval: {benchmarks: tiny-aime, k: 2, checkpoints: final}\n"  # the evaluation stage, small: 46 x 2


def _sweep(tmp_path: Path, methods: list[str], name: str = "mini", extra: str = ""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nbackbones: [tiny-arith]\nmethods: [{', '.join(methods)}]\nprompt_sets: [standard]\n" + extra
    )
    return load_sweep(path), path


def _eval_records(run: Path, step: int = 2) -> list[dict]:
    path = run / "eval" / f"global_step_{step}" / "tiny-aime.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _steps(run: Path) -> list[int]:
    return sorted(
        json.loads(line)["step"]
        for f in (run / "metrics").glob("attempt-*.jsonl")
        for line in f.read_text().splitlines()
    )


def test_slurm_runs_a_cell_through_its_sbatch_script(slurm_env, tmp_path) -> None:
    sweep, _ = _sweep(tmp_path, ["grpo-n4"])
    runs = tmp_path / "runs"
    scheduler = SlurmScheduler(project_dir=ROOT)
    report = submit_sweep(sweep, scheduler, runs, options=SHORT, wait=True, poll=0.5, timeout=300)
    run = runs / cell_name("tiny-arith", "grpo-n4", "standard", 0)
    assert [c.state for c in report.cells] == ["finished"], report.cells
    records = job_records(run)
    assert len(records) == 1 and records[0]["launcher"] == "slurm" and records[0]["job_id"].isdigit()
    job_id = records[0]["job_id"]
    script = run / "slurm" / "job.sbatch"
    assert records[0]["script"] == str(script)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert "--steps 2" in script.read_text().replace(" \\\n    ", " ")
    attempts = json.loads((run / "status.json").read_text())["attempts"]
    assert [(a["launcher"], a["job_id"], a["state"]) for a in attempts] == [("slurm", job_id, "finished")]
    assert _steps(run) == [1, 2]
    # the cell is finished once its status says so, a moment before its process prints its last line and exits:
    # read the job's output once Slurm has the job out of its queue (the process has ended), not before
    deadline = time.monotonic() + 120  # a guard only: the moment waited for is the job's own end
    while subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, f"job {job_id} never left the queue"
        time.sleep(0.1)
    out = (run / "slurm" / f"slurm-{job_id}.out").read_text()
    assert "finished" in out and "at step 2 in" in " ".join(out.split())
    # the same sweep again: nothing to do, no new job
    again = submit_sweep(sweep, scheduler, runs, options=SHORT)
    assert [c.action for c in again.cells] == ["skipped"] and len(job_records(run)) == 1


def test_slurm_sweep_with_evaluation_submits_eval_jobs_after_training(slurm_env, tmp_path, capsys) -> None:
    """Two cells, two training jobs and two evaluation jobs `--dependency=afterok:<training job>`; the records
    appear once training has finished, and the same sweep again submits nothing."""
    sweep, sweep_file = _sweep(tmp_path, ["grpo-n4", "seq-pos"], extra=EVAL)
    runs = tmp_path / "runs"
    scheduler = SlurmScheduler(options=SlurmOptions(cpus_per_task=1), project_dir=ROOT)
    report = submit_sweep(sweep, scheduler, runs, options=SHORT)
    assert [c.action for c in report.cells] == ["submitted", "submitted"], report.cells
    assert all(c.eval_action == f"submitted after job {c.job_id}" for c in report.cells), report.cells
    queue = subprocess.run(["squeue", "-h", "-o", "%i %E"], capture_output=True, text=True, check=True).stdout
    for c in report.cells:  # squeue shows each evaluation job waiting on its cell's training job
        assert f"{c.eval_job_id} afterok:{c.job_id}" in queue, queue
    done = submit_sweep(sweep, scheduler, runs, options=SHORT, wait=True, poll=0.5, timeout=400)
    assert [(c.state, c.eval_state) for c in done.cells] == [("finished", "done")] * 2, done.cells
    for c in report.cells:
        run = runs / c.name
        (job,) = [json.loads(x) for x in (run / "eval-jobs.jsonl").read_text().splitlines()]
        assert job["after"] == c.job_id and job["job_id"] == c.eval_job_id
        records = _eval_records(run)
        assert len(records) == 46 * 2 and {r["sample_index"] for r in records} == {0, 1}
        trained = RunDir(run).status()["attempts"][-1]["ended"]
        summary = run / "eval" / "global_step_2" / "summary.json"
        assert datetime.fromtimestamp(summary.stat().st_mtime, UTC).isoformat() >= trained
        assert "afterok" in (run / "slurm" / "eval.sbatch").read_text() and "--checkpoints final" in (
            run / "slurm" / "eval.sbatch"
        ).read_text().replace(" \\\n    ", " ")
    again = submit_sweep(sweep, scheduler, runs, options=SHORT)
    assert [(c.action, c.eval_state, c.eval_action) for c in again.cells] == [("skipped", "done", "")] * 2
    capsys.readouterr()
    assert main(["status", "--sweep", str(sweep_file), "--runs-root", str(runs)]) == 0
    assert "evaluation: 2 done" in capsys.readouterr().out


def test_concurrent_slurm_sweeps_submit_each_cell_once_and_cancel_stops_them(slurm_env, tmp_path, capsys) -> None:
    sweep, sweep_file = _sweep(tmp_path, ["grpo-n4", "est"])
    runs = tmp_path / "runs"
    # one CPU per job, so both cells run at once on the two-CPU test node
    scheduler = SlurmScheduler(options=SlurmOptions(cpus_per_task=1), project_dir=ROOT)
    long = CpuOptions(steps=2000, batch=8)  # long enough to cancel both mid-run
    barrier = threading.Barrier(2)
    reports = []

    def go() -> None:
        barrier.wait()
        reports.append(submit_sweep(sweep, scheduler, runs, options=long, max_parallel=2))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = [cell_name("tiny-arith", m, "standard", 0) for m in ("grpo-n4", "est")]
    for name in names:
        assert len(job_records(runs / name)) == 1, name  # two sweeps, one job per cell
        assert "#SBATCH --cpus-per-task=1" in (runs / name / "slurm" / "job.sbatch").read_text()
    submitted = sorted(c.name for r in reports for c in r.cells if c.action == "submitted")
    assert submitted == sorted(names)
    # wait until both cells train, then cancel the whole sweep
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not all((runs / n / "metrics").exists() and _steps(runs / n) for n in names):
        time.sleep(0.5)
    assert [cell_state(runs / n).state for n in names] == ["running", "running"]
    capsys.readouterr()
    assert main(["cancel", "--sweep", str(sweep_file), "--runs-root", str(runs)]) == 0
    out = capsys.readouterr().out
    assert out.count("cancelled slurm job") == 2, out
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(cell_state(runs / n).active for n in names):
        time.sleep(0.5)
    for name in names:
        run = runs / name
        assert cell_state(run).state == "cancelled"
        assert RunDir(run).status()["attempts"][-1]["state"] == "interrupted"  # SIGTERM reached `repro run`
        logged = _steps(run)
        assert 1 <= len(logged) < 2000 and logged == list(range(1, len(logged) + 1))


@pytest.fixture(scope="module")
def ray_address():
    with tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as temp, ray_cluster(Path(temp)) as address:
        yield address


def test_ray_jobs_api_runs_two_cells(ray_address, tiny_env, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    sweep, _ = _sweep(tmp_path, ["grpo-n4", "seq-pos"], extra=EVAL)
    runs = tmp_path / "runs"
    scheduler = RayScheduler(address=ray_address, project_dir=ROOT, python=sys.executable)
    report = submit_sweep(sweep, scheduler, runs, options=SHORT, wait=True, poll=1, timeout=420)
    assert [c.state for c in report.cells] == ["finished", "finished"], report.cells
    assert [c.eval_state for c in report.cells] == ["done", "done"], report.cells
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_address)
    for method in ("grpo-n4", "seq-pos"):
        run = runs / cell_name("tiny-arith", method, "standard", 0)
        (record,) = job_records(run)
        assert record["launcher"] == "ray" and record["address"] == ray_address
        deadline = time.monotonic() + 60  # the run folder says finished a moment before the job process exits
        while time.monotonic() < deadline and client.get_job_status(record["job_id"]).value == "RUNNING":
            time.sleep(0.5)
        assert client.get_job_status(record["job_id"]).value == "SUCCEEDED"
        info = client.get_job_info(record["job_id"])
        assert info.runtime_env["env_vars"]["REPRO_JOB_ID"] == record["job_id"]
        assert info.runtime_env["env_vars"]["REPRO_TORCH_THREADS"] == "1" and record["entrypoint_num_cpus"] == 1
        attempts = RunDir(run).status()["attempts"]
        assert [(a["launcher"], a["job_id"], a["state"]) for a in attempts] == [("ray", record["job_id"], "finished")]
        assert _steps(run) == [1, 2]
        assert (run / "checkpoints" / "global_step_2").is_dir()
        assert RunDir(run).read_metrics().corrupt == 0
        # the training job submitted the evaluation as its last act (its entrypoint's `&& ... ray-submit`)
        assert "repro.launch.eval_stage ray-submit" in record["entrypoint"]
        (eval_job,) = [json.loads(x) for x in (run / "eval-jobs.jsonl").read_text().splitlines()]
        while time.monotonic() < deadline and client.get_job_status(eval_job["job_id"]).value == "RUNNING":
            time.sleep(0.5)  # its summary is written a moment before the job process exits
        assert eval_job["launcher"] == "ray" and client.get_job_status(eval_job["job_id"]).value == "SUCCEEDED"
        assert len(_eval_records(run)) == 46 * 2


def test_a_job_that_dies_before_training_is_failed_with_its_last_line_and_retry_resubmits(
    slurm_env, tmp_path, capsys
) -> None:
    sweep, sweep_file = _sweep(tmp_path, ["grpo-n4"], extra=EVAL)
    runs = tmp_path / "runs"
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "python").write_text("#!/usr/bin/env bash\necho 'ImportError: no module named repro' >&2\nexit 3\n")
    (broken / "python").chmod(0o755)
    report = submit_sweep(
        sweep, SlurmScheduler(project_dir=ROOT, python_bin=broken), runs, options=SHORT, wait=True, poll=0.5,
        retries=0, timeout=120,
    )  # fmt: skip
    run = runs / cell_name("tiny-arith", "grpo-n4", "standard", 0)
    (cell,) = report.cells
    assert cell.state == "failed", cell
    assert (
        f"slurm job {cell.job_id} ended FAILED" in cell.reason and "ImportError: no module named repro" in cell.reason
    )
    assert RunDir(run).status()["attempts"] == []  # training never began
    assert cell.eval_state == "not started", cell  # its afterok evaluation job never ran: Slurm removed it
    (eval_job,) = [json.loads(x) for x in (run / "eval-jobs.jsonl").read_text().splitlines()]
    assert SlurmScheduler().state(eval_job).state == "cancelled" and not list(run.glob("eval/**/*.jsonl"))
    capsys.readouterr()
    assert main(["status", "--sweep", str(sweep_file), "--runs-root", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "ImportError" in out and "not started" in out and "evaluation: 1 not started" in out, out
    # retry-failed with a working interpreter: the same run folder, a second job, now finished
    code = main(["sweep", "retry-failed", str(sweep_file), "--launcher", "slurm", "--runs-root", str(runs),
                 "--steps", "2", "--batch", "8", "--wait", "--poll", "0.5"])  # fmt: skip
    assert code == 0
    records = job_records(run)
    assert len(records) == 2 and records[0]["job_id"] != records[1]["job_id"]
    assert RunDir(run).state == "finished" and _steps(run) == [1, 2]
    # and a new evaluation job behind the new training job, which ran
    eval_jobs = [json.loads(x) for x in (run / "eval-jobs.jsonl").read_text().splitlines()]
    assert len(eval_jobs) == 2 and eval_jobs[1]["after"] == records[1]["job_id"]
    assert len(_eval_records(run)) == 46 * 2


def test_ray_submission_is_sent_again_while_the_head_says_try_again_later(tmp_path, monkeypatch) -> None:
    """Ray's Jobs API answers "No available agent to submit job, please try again later." while no node's job
    agent is up (seen here on a freshly started, busy cluster): nothing was submitted, so the launcher sends the
    same submission id again after a wait; any other refusal is one line at once."""
    from types import SimpleNamespace

    from repro.errors import ReproError
    from repro.launch import ray_jobs

    calls, waits = [], []

    class Client:
        def __init__(self, refusals: list[str]) -> None:
            self.refusals = refusals

        def submit_job(self, **kwargs) -> str:
            calls.append(kwargs["submission_id"])
            if self.refusals:
                raise RuntimeError(self.refusals.pop(0))
            return kwargs["submission_id"]

    busy = "Request failed with status code 500: No available agent to submit job, please try again later."
    plan = SimpleNamespace(name="cell", argv=["python", "-m", "repro.cli", "run"], run_dir=tmp_path, is_gpu=False)
    monkeypatch.setattr(ray_jobs.time, "sleep", waits.append)
    client = Client([busy, busy])
    monkeypatch.setattr(ray_jobs, "_client", lambda address: client)
    record = RayScheduler(project_dir=tmp_path).submit(plan, "sweep")
    assert calls == [record["job_id"]] * 3 and waits == list(ray_jobs.SUBMIT_RETRY_S[:2])
    calls.clear(), waits.clear()
    client.refusals = [busy] * (len(ray_jobs.SUBMIT_RETRY_S) + 1)  # never comes up: refused after the last wait
    with pytest.raises(ReproError, match=r"Ray refused the job for cell: .*try again later"):
        RayScheduler(project_dir=tmp_path).submit(plan, "sweep")
    assert len(calls) == len(ray_jobs.SUBMIT_RETRY_S) + 1 and waits == list(ray_jobs.SUBMIT_RETRY_S)
    calls.clear(), waits.clear()
    client.refusals = ["Request failed with status code 400: runtime_env is invalid"]
    with pytest.raises(ReproError, match="runtime_env is invalid"):
        RayScheduler(project_dir=tmp_path).submit(plan, "sweep")
    assert len(calls) == 1 and waits == []


# ---- a time limit per Ray job (repro.launch.deadline): continued in new jobs, to the straight run's weights ------


def _live(run: Path, job_id: str) -> dict | None:
    """The deadline wrapper's live record of job `job_id`, once that job's cell has started."""
    from repro.launch.deadline import live_record

    live = live_record(run)
    return live if live is not None and live.get("job_id") == job_id else None


def _until(predicate, what: str, seconds: float = 300):
    """Wait for `predicate` to hold (a generous failure guard, not a calibration); returns its value."""
    end = time.monotonic() + seconds
    while not (value := predicate()):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def _nth_job(run: Path, n: int) -> str | None:
    records = job_records(run)
    return str(records[n - 1]["job_id"]) if len(records) >= n else None


def _logged(run: Path, attempt: int) -> int:
    from repro.rundir.attempts import last_logged_step

    return last_logged_step(run / "metrics" / f"attempt-{attempt:03d}.jsonl") or 0


def _frozen(live: dict):
    """SIGSTOP the cell's whole process group, so the moment the test acts at is the one it chose (the cell cannot
    get past it meanwhile); returns the function that lets it go on."""
    import os
    import signal

    os.killpg(live["cell_pgid"], signal.SIGSTOP)
    return lambda: os.killpg(live["cell_pgid"], signal.SIGCONT)


def test_a_ray_cell_past_its_time_limit_goes_on_in_new_jobs_to_the_straight_runs_weights(
    ray_address, tiny_env, tmp_path, monkeypatch
) -> None:
    """One cell, four jobs under a one-hour limit whose moments the test brings forward through the wrapper's signals,
    each at a point the cell reports (its metrics file, the wrapper's live record) while the cell's process group is
    frozen: job 1 is warned after its second step (USR1: the stop request; it stops at its step boundary), job 2
    reaches its limit after a step (ALRM: SIGTERM mid-run), job 3 is warned while it starts (it stops before its first
    step), job 4 runs to the end. The waiting submitter continues the cell after each without spending a retry, and
    the cell ends bit-identical to the same cell trained straight through."""
    import os
    import signal

    import torch
    from ray.job_submission import JobSubmissionClient
    from safetensors.torch import load_file

    from repro.launch.allocations import STOP_REQUEST, STOPPED_EXIT
    from repro.launch.deadline import LIVE_FILE, TimeLimit, job_log

    monkeypatch.chdir(ROOT)
    steps = 12  # ten steps of slack after the first warning's point: nothing the test waits for can be overtaken
    cpu = CpuOptions(steps=steps, batch=8)
    straight_dir = tmp_path / "straight"
    straight = subprocess.Popen(  # the reference, trained straight through with the job's one thread
        [sys.executable, "cli.py", "run", "--model", "tiny-arith", "--method", "grpo-n4", *cpu.args(),
         "--run-dir", str(straight_dir)],
        cwd=ROOT, env={**tiny_env, "REPRO_TORCH_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    sweep, _ = _sweep(tmp_path, ["grpo-n4"])
    runs = tmp_path / "runs"
    run = runs / cell_name("tiny-arith", "grpo-n4", "standard", 0)
    limit = TimeLimit("1:00:00", signal_margin=60, max_allocations=5)
    scheduler = RayScheduler(address=ray_address, project_dir=ROOT, python=sys.executable, limit=limit)
    reports: list = []
    sweeper = threading.Thread(
        target=lambda: reports.append(
            submit_sweep(sweep, scheduler, runs, options=cpu, wait=True, poll=0.5, timeout=900, retries=0)
        ),
        daemon=True,
    )
    sweeper.start()
    try:
        # job 1: warned after step 2
        live = _until(lambda: (job := _nth_job(run, 1)) and _live(run, job), "job 1's cell")
        _until(lambda: _logged(run, 1) >= 2, "job 1's second step")
        go_on = _frozen(live)
        os.kill(live["pid"], signal.SIGUSR1)
        _until(lambda: (run / STOP_REQUEST).exists(), "job 1's stop request")
        go_on()
        # job 2: its limit after a step
        live = _until(lambda: (job := _nth_job(run, 2)) and _live(run, job), "job 2's cell")
        _until(lambda: _logged(run, 2) >= 1, "a step of job 2")
        go_on = _frozen(live)
        os.kill(live["pid"], signal.SIGALRM)
        _until(lambda: "terminated" in (_live(run, live["job_id"]) or {}), "job 2's SIGTERM")
        go_on()
        # job 3: warned as it starts
        live = _until(lambda: (job := _nth_job(run, 3)) and _live(run, job), "job 3's cell")
        go_on = _frozen(live)
        os.kill(live["pid"], signal.SIGUSR1)
        _until(lambda: (run / STOP_REQUEST).exists(), "job 3's stop request")
        go_on()
    finally:
        sweeper.join(timeout=900)
    (report,) = reports
    (cell,) = report.cells
    assert (cell.state, cell.submissions, cell.continuations) == ("finished", 1, 3), cell
    records = job_records(run)
    assert [r["allocation"] for r in records] == [1, 2, 3, 4] and {r["max_allocations"] for r in records} == {5}
    client = JobSubmissionClient(ray_address)
    for record in records[:3]:
        info = client.get_job_info(record["job_id"])
        assert (info.status.value, info.driver_exit_code) == ("FAILED", STOPPED_EXIT), info.message
    _until(lambda: client.get_job_status(records[3]["job_id"]).value != "RUNNING", "job 4's process to exit", 60)
    assert client.get_job_status(records[3]["job_id"]).value == "SUCCEEDED"
    endings = ["stopped on request", "deadline", "stopped on request", "finished"]
    assert [(e["job_id"], e["ended_by"]) for e in job_log(run)] == [
        (r["job_id"], e) for r, e in zip(records, endings, strict=True)
    ]
    attempts = RunDir(run).status()["attempts"]
    spans = [(a.get("resumed_from_step"), _logged(run, i + 1)) for i, a in enumerate(attempts)]
    print(f"\n{len(records)} jobs, (resumed from, last step logged): {spans}; ended by {endings}")
    assert [(a["job_id"], a["state"]) for a in attempts] == [
        (r["job_id"], s) for r, s in zip(records, ["interrupted"] * 3 + ["finished"], strict=True)
    ]
    first = _logged(run, 1)
    assert 2 <= first < steps and attempts[0]["error"] == f"allocation ending: checkpoint at step {first}, 0 steps lost"
    assert attempts[1]["resumed_from_step"] == first and attempts[1]["error"].startswith("stopped by a signal")
    # job 3 trained no step: it stopped at the checkpoint job 2 left (its last logged step, or one it saved as the
    # TERM came and whose metrics line job 3 then wrote), which job 4 resumed from
    kept = attempts[3]["resumed_from_step"]
    assert kept >= _logged(run, 2) >= first + 1 and attempts[2]["resumed_from_step"] == kept
    assert attempts[2]["error"] == f"allocation ending: checkpoint at step {kept}, 0 steps lost"
    assert _steps(run) == list(range(1, steps + 1))  # every step once, whatever the limit interrupted
    assert not (run / STOP_REQUEST).exists() and not (run / LIVE_FILE).exists()
    assert straight.wait(timeout=300) == 0, straight.stderr.read()[-2000:]
    final = f"checkpoints/global_step_{steps}/model/model.safetensors"
    a, b = load_file(run / final), load_file(straight_dir / final)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_ray_cell_its_few_second_limit_ends_takes_its_jobs_and_stays_interrupted(
    ray_address, tiny_env, tmp_path, monkeypatch
) -> None:
    """The real clock: a five-second limit (warned two seconds before) on a cell of 2000 steps, which no job can
    finish; wherever each limit lands (while the cell starts, mid-step, mid-save), the job ends as a continuation,
    the submitter runs the two jobs --max-allocations allows and stops there, and the run folder stays consistent:
    every step it logged, once."""
    from ray.job_submission import JobSubmissionClient

    from repro.launch.allocations import STOPPED_EXIT
    from repro.launch.deadline import TimeLimit, job_log

    monkeypatch.chdir(ROOT)
    sweep, _ = _sweep(tmp_path, ["grpo-n4"])
    runs = tmp_path / "runs"
    limit = TimeLimit("0:05", signal_margin=2, max_allocations=2)
    scheduler = RayScheduler(address=ray_address, project_dir=ROOT, python=sys.executable, limit=limit)
    events: list[str] = []
    report = submit_sweep(
        sweep, scheduler, runs, options=CpuOptions(steps=2000, batch=8), wait=True, poll=0.5, timeout=600,
        retries=3, on_event=events.append,
    )  # fmt: skip
    (cell,) = report.cells
    run = runs / cell.name
    assert (cell.state, cell.action, cell.submissions, cell.continuations) == (
        "interrupted", "allocation 2 was the last of 2", 1, 1
    ), (cell, events)  # fmt: skip
    records = job_records(run)
    assert [r["allocation"] for r in records] == [1, 2]
    client = JobSubmissionClient(ray_address)
    for record in records:
        info = client.get_job_info(record["job_id"])
        assert (info.status.value, info.driver_exit_code) == ("FAILED", STOPPED_EXIT), info.message
    ends = [e["ended_by"] for e in job_log(run)]
    assert [e in ("stopped on request", "deadline") for e in ends] == [True, True], ends
    logged = _steps(run)
    print(f"\n2 jobs of 5 s: ended by {ends}, {len(logged)} steps logged")
    assert logged == list(range(1, len(logged) + 1)) and len(logged) < 2000
    assert any("stays interrupted" in line for line in events), events


def test_a_cancelled_ray_cell_under_a_time_limit_is_not_continued(ray_address, tiny_env, tmp_path, monkeypatch, capsys):
    """`repro cancel` stops the job through Ray's stop_job, which TERMs the wrapper: the cell is cancelled, and the
    waiting submitter, which continues a job its limit ended, leaves it alone."""
    monkeypatch.chdir(ROOT)
    from repro.launch.deadline import TimeLimit

    sweep, sweep_file = _sweep(tmp_path, ["grpo-n4"])
    runs = tmp_path / "runs"
    run = runs / cell_name("tiny-arith", "grpo-n4", "standard", 0)
    limit = TimeLimit("1:00:00", max_allocations=3)
    scheduler = RayScheduler(address=ray_address, project_dir=ROOT, python=sys.executable, limit=limit)
    reports: list = []
    sweeper = threading.Thread(
        target=lambda: reports.append(
            submit_sweep(sweep, scheduler, runs, options=CpuOptions(2000, 8), wait=True, poll=0.5, timeout=600)
        ),
        daemon=True,
    )
    sweeper.start()
    try:
        _until(lambda: (job := _nth_job(run, 1)) and _live(run, job) and _logged(run, 1) >= 1, "a step of job 1")
        capsys.readouterr()
        assert main(["cancel", "--sweep", str(sweep_file), "--runs-root", str(runs)]) == 0
    finally:
        sweeper.join(timeout=600)
    (cell,) = reports[0].cells
    assert (cell.state, cell.continuations) == ("cancelled", 0), cell
    assert len(job_records(run)) == 1
    # interrupted: recorded by the cell, or (a loaded machine, Ray's SIGKILL 3 s after its TERM) read from its lock
    assert RunDir(run).state == "interrupted"
