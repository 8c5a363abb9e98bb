"""`repro collect` on real tiny runs: the tables' contents, attempt merging, corrupt lines, concurrency, atomicity."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import typer
import yaml
from typer.testing import CliRunner

from repro import arithmetic
from repro.commands.collect import collect as collect_command
from repro.errors import ReproError
from repro.report.collect import collect
from repro.report.results_files import read_results, results_lock
from repro.report.schema import GENERATED_CUMULATIVE, MATCHED_TABLES, RUN_KEYS, TABLES, WEIGHTED_AVERAGE

METHODS = ("grpo-n4", "seq-balance", "est")
RUNS = sorted(f"tiny-arith__{m}__standard__s0" for m in METHODS)


@pytest.fixture
def runs(tiny_runs, tmp_path) -> Path:
    """A private copy of the fixture runs: these tests add files to run folders."""
    root = tmp_path / "runs"
    shutil.copytree(tiny_runs, root, ignore=shutil.ignore_patterns("checkpoints"))
    return root


def _jsonl(path: Path) -> dict[int, dict]:
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        out[record["step"]] = record["data"]
    return out


def _same(a, b) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return a == b


def _cli():
    app = typer.Typer(rich_markup_mode="markdown", pretty_exceptions_enable=False)
    app.command("collect")(collect_command)
    app.command("noop")(lambda: None)  # two commands, so "collect" is a subcommand as in repro's app
    return app


def _invoke(*args: str):
    return CliRunner().invoke(_cli(), ["collect", *args], terminal_width=200)


def _files(results: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(results.iterdir()) if p.name != ".collect.lock"}


def _add_second_attempt(run: Path) -> None:
    """Attempt 2 replays steps 3-4 with new values, adds step 5; one corrupt middle line, one torn tail."""
    first = _jsonl(run / "metrics" / "attempt-001.jsonl")
    lines = []
    for step in (3, 4):
        data = dict(first[step])
        data["critic/rewards/mean"] = 100.0 + step
        data["sampler/zero_variance_frac"] = 0.5 + step / 100
        lines.append(json.dumps({"step": step, "data": data}))
    lines.append('{"step": 9, "data": {"critic/rewards/mean": 0.1, "actor/ent')  # corrupt middle line
    lines.append(json.dumps({"step": 5, "data": {**first[4], "critic/rewards/mean": 105.0}}))
    text = "\n".join(lines) + "\n" + '{"step": 6, "data": {"critic/rew'  # torn last line, no newline
    (run / "metrics" / "attempt-002.jsonl").write_text(text)


def test_collect_tiny_runs_tables_match_run_files(runs, tmp_path):
    results = tmp_path / "results"
    report = collect(runs, results)

    assert [r.run for r in report.runs] == RUNS
    assert report.skipped == [] and report.not_runs == [] and report.corrupt == dict.fromkeys(RUNS, 0)
    assert sorted(p.name for p in report.written) == sorted(
        f"{t}.{ext}" for t in (*TABLES, *MATCHED_TABLES) for ext in ("parquet", "csv")
    )

    tables = read_results(results)
    training = tables["training"]
    assert list(training.columns[:6]) == [*RUN_KEYS, "step"]
    assert len(training) == 12
    assert not training.duplicated(["run", "step"]).any()
    assert training.groupby("run")["step"].apply(list).to_dict() == {run: [1, 2, 3, 4] for run in RUNS}
    assert {"critic/rewards/mean", "sampler/zero_variance_frac", "actor/entropy", "timing_s/step"} <= set(
        training.columns
    )
    assert set(training["method"]) == set(METHODS) and set(training["seed"]) == {0}
    checked = 0
    for run in RUNS:
        logged = _jsonl(runs / run / "metrics" / "attempt-001.jsonl")
        rows = training[training["run"] == run].set_index("step")
        for step, data in logged.items():
            for name, value in data.items():
                assert _same(value, rows.loc[step, name]), (run, step, name)
                checked += 1
        # other methods' metrics are NaN here; the one column collect derives is the running sum of the tokens
        absent = set(training.columns[6:]) - set(logged[1]) - {GENERATED_CUMULATIVE}
        assert rows[sorted(absent)].isna().all().all()
        assert rows[GENERATED_CUMULATIVE].tolist() == rows["tokens/generated"].cumsum().tolist()
    assert checked > 12 * 40

    ev = tables["eval"]
    assert list(ev.columns) == [
        *RUN_KEYS,
        "checkpoint_step",
        "benchmark",
        "problems",
        "k",
        "ave_at_k",
        "pass@1",
        "pass@2",
        "pass@4",
    ]
    assert len(ev) == 9
    for run in RUNS:
        summary = json.loads((runs / run / "eval" / "global_step_4" / "summary.json").read_text())
        rows = ev[ev["run"] == run]
        assert list(rows["benchmark"]) == ["tiny-minerva", "tiny-aime", WEIGHTED_AVERAGE]
        assert set(rows["checkpoint_step"]) == {4} and set(rows["k"]) == {4}
        for _, row in rows.iterrows():
            if row["benchmark"] == WEIGHTED_AVERAGE:
                assert row["ave_at_k"] == summary["weighted_average"]
                assert row["problems"] == 100
                expected = summary["weighted_pass_at_k"]
            else:
                entry = summary["benchmarks"][row["benchmark"]]
                assert row["ave_at_k"] == entry["ave_at_k"]
                assert row["problems"] == entry["problems"]
                expected = entry["pass_at_k"]
            assert {k: row[f"pass@{k}"] for k in ("1", "2", "4")} == expected

    runs_table = tables["runs"]
    assert list(runs_table.columns) == [
        *RUN_KEYS,
        "state",
        "steps_logged",
        "corrupt_lines",
        "duplicate_steps",
        "metrics_files",
        "path",
        "arithmetic",
        "cpu",
    ]
    assert list(runs_table["run"]) == RUNS
    # the suite computes pinned (conftest), and every attempt records its CPU (repro.arithmetic)
    assert all("pinned: ATen avx2, MKL_CBWR=COMPATIBLE" in a for a in runs_table["arithmetic"])
    assert set(runs_table["cpu"]) == {arithmetic.cpu_model()}
    assert set(runs_table["state"]) == {"finished"}
    assert list(runs_table["steps_logged"]) == [4, 4, 4]
    assert list(runs_table["corrupt_lines"]) == [0, 0, 0]
    assert list(runs_table["metrics_files"]) == [1, 1, 1]
    assert list(runs_table["path"]) == list(RUNS)  # relative to the runs root (issue 15): the folder names

    for name in TABLES:  # the CSV says what the Parquet says
        parquet = pd.read_parquet(results / f"{name}.parquet")
        csv = pd.read_csv(results / f"{name}.csv")
        pd.testing.assert_frame_equal(parquet, csv, check_dtype=False, check_exact=True)
        pd.testing.assert_frame_equal(parquet, report.tables[name])


def test_attempts_merge_by_step_and_corrupt_lines_are_counted(runs, tmp_path):
    run = runs / RUNS[0]
    _add_second_attempt(run)
    first = _jsonl(run / "metrics" / "attempt-001.jsonl")
    results = tmp_path / "results"
    result = _invoke("--runs-root", str(runs), "--results", str(results))
    assert result.exit_code == 0, result.output

    tables = read_results(results)
    rows = tables["training"][tables["training"]["run"] == run.name]
    assert list(rows["step"]) == [1, 2, 3, 4, 5]
    rows = rows.set_index("step")
    assert list(rows["critic/rewards/mean"]) == [
        first[1]["critic/rewards/mean"],
        first[2]["critic/rewards/mean"],
        103.0,
        104.0,
        105.0,
    ]
    assert rows.loc[3, "sampler/zero_variance_frac"] == 0.53 and rows.loc[4, "sampler/zero_variance_frac"] == 0.54
    assert rows.loc[2, "actor/entropy"] == first[2]["actor/entropy"]
    assert len(tables["training"]) == 13  # the other runs are untouched

    info = tables["runs"].set_index("run").loc[run.name]
    assert (info["steps_logged"], info["corrupt_lines"], info["duplicate_steps"], info["metrics_files"]) == (5, 2, 2, 2)
    assert tables["runs"]["corrupt_lines"].sum() == 2

    row = next(line for line in result.output.splitlines() if run.name in line and "│" in line)
    assert row.split("│")[-2].strip() == "2"  # "corrupt lines skipped" column
    assert "2 corrupt metrics line(s) skipped" in result.output
    assert f"wrote {results / 'training.parquet'}" in result.output

    report = collect(runs, results)
    assert report.corrupt == {RUNS[0]: 2, RUNS[1]: 0, RUNS[2]: 0}
    assert any(RUNS[0] in w and "2 corrupt" in w for w in report.warnings)


def test_unreadable_folders_are_skipped_with_a_reason(runs, tmp_path):
    good = runs / RUNS[0]
    bad_status = runs / "tiny-arith__dapo__standard__s0"
    shutil.copytree(good, bad_status)
    (bad_status / "status.json").write_text('{"state": "fini')
    bad_config = runs / "tiny-arith__seq-pos__standard__s0"
    shutil.copytree(good, bad_config)
    (bad_config / "config.yaml").write_text("backbone: [tiny\n  : :")
    verl = runs / "qwen2.5-math-1.5b__seq-balance__hard__s3"  # a GPU run: its config has no cell keys
    shutil.copytree(runs / RUNS[1], verl)
    (verl / "config.yaml").write_text(yaml.safe_dump({"cell": verl.name, "preset": "paper", "overrides": ["a=1"]}))
    shutil.copytree(good, runs / f"{good.name}.replaced-20260101T000000Z")
    (runs / "notes").mkdir()
    (runs / ".tiny-arith__x__standard__s0.creating-123").mkdir()
    (runs / "README.txt").write_text("not a folder")

    report = collect(runs, tmp_path / "results")
    assert sorted(r.run for r in report.runs) == sorted([*RUNS, verl.name])
    skipped = dict(report.skipped)
    assert set(skipped) == {bad_status.name, bad_config.name}
    assert "status.json" in skipped[bad_status.name] and "corrupt" in skipped[bad_status.name]
    assert "config.yaml" in skipped[bad_config.name] and "corrupt" in skipped[bad_config.name]
    assert len(report.not_runs) == 3

    runs_table = report.tables["runs"].set_index("run")
    assert runs_table.loc[verl.name, ["backbone", "method", "prompt_set", "seed"]].tolist() == [
        "qwen2.5-math-1.5b",
        "seq-balance",
        "hard",
        3,
    ]
    training = report.tables["training"]
    assert len(training[training["backbone"] == "qwen2.5-math-1.5b"]) == 4
    assert len(report.tables["eval"]) == 12

    result = _invoke("--runs-root", str(runs), "--results", str(tmp_path / "results"))
    assert result.exit_code == 0
    assert f"skipped {bad_status.name}: status.json is corrupt" in result.output


def _model_folder(root: Path, key: str, marker: dict | str, summary: dict | None = None) -> Path:
    folder = root / key
    (folder / "eval").mkdir(parents=True)
    (folder / "model_eval.json").write_text(marker if isinstance(marker, str) else json.dumps(marker))
    if summary is not None:
        (folder / "eval" / "summary.json").write_text(json.dumps(summary))
    return folder


def test_model_run_folders_are_collected_beside_runs(runs, tmp_path):
    released = {
        "kind": "released-checkpoint",
        "key": "qwen2.5-math-7b-balance-hard",
        "backbone": "qwen2.5-math-7b",
        "method": "seq-balance",
        "prompt_set": "hard",
        "eval_seed": 3,
    }
    summary = {
        "k": 32,
        "benchmarks": {
            "math500": {"problems": 500, "ave_at_k": 0.83, "pass_at_k": {"1": 0.83, "32": 0.95}},
            "aime_like": {"problems": 230, "ave_at_k": 0.25, "pass_at_k": {"1": 0.25, "32": 0.6}},
        },
        "weighted_average": 0.6473,
        "weighted_pass_at_k": {"1": 0.6473, "32": 0.84},
        "weights": {"math500": 500, "aime_like": 230},
    }
    _model_folder(runs, "qwen2.5-math-7b-balance-hard", released, summary)
    base = {"kind": "base-model", "key": "qwen2.5-math-7b", "backbone": "qwen2.5-math-7b", "method": None}
    _model_folder(runs, "qwen2.5-math-7b", base)  # evaluation still running: no summary yet
    _model_folder(runs, "broken", "{not json")

    report = collect(runs, tmp_path / "results")
    states = {r.run: r.state for r in report.runs}
    assert states == {
        **dict.fromkeys(RUNS, "finished"),
        "qwen2.5-math-7b-balance-hard": "released-checkpoint",
        "qwen2.5-math-7b": "base-model",
    }
    assert dict(report.skipped) == {"broken": "model_eval.json is unreadable (JSONDecodeError)"}
    assert any("qwen2.5-math-7b/eval/summary.json does not exist" in w for w in report.warnings)

    ev = report.tables["eval"]
    assert list(ev.columns) == [
        *RUN_KEYS,
        "checkpoint_step",
        "benchmark",
        "problems",
        "k",
        "ave_at_k",
        "pass@1",
        "pass@2",
        "pass@4",
        "pass@32",
        "origin",
        "model",
    ]
    assert set(ev.loc[ev["run"].isin(RUNS), "origin"]) == {"run"} and ev.loc[ev["run"].isin(RUNS), "model"].isna().all()
    mine = ev[ev["origin"] == "released-checkpoint"]
    assert mine["benchmark"].tolist() == ["math500", "aime_like", WEIGHTED_AVERAGE]
    assert mine["ave_at_k"].tolist() == [0.83, 0.25, 0.6473]
    assert mine["pass@32"].tolist() == [0.95, 0.6, 0.84] and mine["pass@2"].isna().all()
    assert mine["problems"].tolist() == [500, 230, 730]
    first = mine.iloc[0]
    assert (first["backbone"], first["method"], first["prompt_set"], first["seed"], first["checkpoint_step"]) == (
        "qwen2.5-math-7b",
        "seq-balance (released checkpoint)",
        "hard",
        3,
        0,
    )
    assert set(mine["model"]) == {"qwen2.5-math-7b-balance-hard"}
    runs_table = report.tables["runs"].set_index("run")
    assert runs_table.loc["qwen2.5-math-7b", ["method", "prompt_set", "steps_logged"]].tolist() == [
        "base model",
        "none",
        0,
    ]
    assert len(report.tables["training"]) == 12  # training rows are the runs' alone


def test_empty_or_missing_runs_root_is_one_line_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "scratch").mkdir()  # a folder that is not a run does not count
    for root in (empty, tmp_path / "missing"):
        result = _invoke("--runs-root", str(root), "--results", str(tmp_path / "results"))
        assert result.exit_code != 0
        assert isinstance(result.exception, ReproError)
        message = str(result.exception)
        assert message.startswith(f"no run folders under {root}") and "run `repro run ...` first" in message
        assert "\n" not in message
    with pytest.raises(ReproError, match="no run folders under"):
        collect(empty, tmp_path / "results")


_CHILD = (
    "import fcntl, sys\nfrom repro.report.collect import collect\n"
    "real_flock = fcntl.flock\n"
    "def flock(fd, op):  # collect's lock found busy: touch the file the test waits for, then wait as collect does\n"
    "    if op == fcntl.LOCK_EX:\n"
    "        try:\n            return real_flock(fd, op | fcntl.LOCK_NB)\n"
    "        except BlockingIOError:\n            open(sys.argv[4], 'a').close()\n"
    "    return real_flock(fd, op)\n"
    "fcntl.flock = flock\n"
    "for _ in range(int(sys.argv[3])):\n    collect(sys.argv[1], sys.argv[2])\n"
)
HANG_GUARD_S = 120.0  # only a failure guard: each wait below ends as soon as the child's file appears


def _spawn(runs: Path, results: Path, waiting: Path, times: int = 1) -> subprocess.Popen:
    """A `collect` in a child process; it touches `waiting` when it finds the results lock held by another."""
    argv = [sys.executable, "-c", _CHILD, str(runs), str(results), str(times), str(waiting)]
    return subprocess.Popen(argv, stderr=subprocess.PIPE)


def _wait_blocked(child: subprocess.Popen, waiting: Path) -> None:
    """Until `child` is waiting for the results lock: its file says it found the lock busy (it then blocks)."""
    end = time.monotonic() + HANG_GUARD_S
    while not waiting.exists():
        assert child.poll() is None, child.stderr.read().decode()
        assert time.monotonic() < end, f"the child never reached the results lock in {HANG_GUARD_S} s"
        time.sleep(0.02)


def _read_whole(shared: Path, single: Path) -> None:
    for name in ("training", "eval", "runs"):  # never half a file, never a different shape
        assert pd.read_csv(shared / f"{name}.csv").shape == pd.read_csv(single / f"{name}.csv").shape
        assert pd.read_parquet(shared / f"{name}.parquet").shape == pd.read_parquet(single / f"{name}.parquet").shape


def test_concurrent_collects_take_turns_and_readers_see_whole_files(runs, tmp_path):
    """Two collects at once, a reader beside them; then a collect while the lock is held. Each child says when
    it found the lock busy (a file), so the test knows it is blocked there rather than hoping a sleep was
    long enough for it to get that far."""
    _add_second_attempt(runs / RUNS[0])
    single = tmp_path / "single"
    collect(runs, single)
    expected = _files(single)

    shared = tmp_path / "shared"
    collect(runs, shared)  # readers below always find a file
    with results_lock(shared):  # both start blocked, so the reader runs at least once while they are alive
        waiting = [tmp_path / "waiting-a", tmp_path / "waiting-b"]
        children = [_spawn(runs, shared, waiting[0], times=4), _spawn(runs, shared, waiting[1], times=4)]
        for child, file in zip(children, waiting, strict=True):
            _wait_blocked(child, file)
        _read_whole(shared, single)
    while any(c.poll() is None for c in children):  # and on while they write, turn by turn
        _read_whole(shared, single)
    for child in children:
        assert child.wait() == 0, child.stderr.read().decode()
    assert _files(shared) == expected  # complete, identical to one collect's output, no temp file left

    # the second collect waits for the lock rather than writing alongside the first
    before = {p.name: p.stat().st_mtime_ns for p in shared.iterdir()}
    with results_lock(shared):
        child = _spawn(runs, shared, tmp_path / "waiting-c")
        _wait_blocked(child, tmp_path / "waiting-c")
        assert child.poll() is None  # blocked on the lock this process holds
        assert {p.name: p.stat().st_mtime_ns for p in shared.iterdir()} == before  # nothing written meanwhile
    assert child.wait(timeout=HANG_GUARD_S) == 0, child.stderr.read().decode()
    assert _files(shared) == expected


def test_failed_write_leaves_previous_results_and_no_temp_file(runs, tmp_path, monkeypatch):
    results = tmp_path / "results"
    collect(runs, results)
    before = _files(results)
    _add_second_attempt(runs / RUNS[0])  # the next collect would change training and runs

    real_write = pd.DataFrame.to_parquet
    calls = []

    def torn_write(self, path, *args, **kwargs):  # runs.parquet and runs.csv are staged; training.parquet fails
        calls.append(path)
        if len(calls) == 1:
            return real_write(self, path, *args, **kwargs)
        Path(path).write_bytes(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", torn_write)
    with pytest.raises(OSError, match="No space left"):
        collect(runs, results)
    assert len(calls) == 2
    assert _files(results) == before
    assert sorted(p.name for p in results.iterdir()) == sorted([*before, ".collect.lock"])

    monkeypatch.undo()  # the lock was released: the next collect goes through
    report = collect(runs, results)
    assert len(report.tables["training"]) == 13
    assert len(pd.read_parquet(results / "training.parquet")) == 13


def test_verl_run_sampler_file_reaches_collect_and_the_sampling_table(tmp_path, capsys):
    """A GPU (verl) run: verl's file logger writes attempt-001.jsonl, the plugin's manager writes the
    sampler metrics beside it (attempt-001.sampler.jsonl); both land in the same training rows."""
    from repro.cli import main
    from repro.rundir import MetricsWriter, RunDir

    name = "qwen2.5-math-7b__seq-balance__standard__s0"
    root = tmp_path / "runs"
    run = RunDir.prepare(root / name, {"cell": name, "preset": "paper", "overrides": ["a=1"]}, ["repro", "run"])
    attempt = run.begin_attempt()
    with MetricsWriter(attempt) as verl_log, MetricsWriter(attempt.with_name("attempt-001.sampler.jsonl")) as side:
        for step in (1, 2, 3):
            side.log(
                step,
                {
                    "sampler/prompts": 8,
                    "sampler/responses_total": 64 + 8 * step,
                    "sampler/responses_per_prompt": (64 + 8 * step) / 8,
                    "sampler/signal_frac": 0.5,
                    "sampler/zero_variance_frac": 0.25,
                    "sampler/unresolved": 2,
                    "sampler/additional_samples": 8 * step,
                },
            )
            verl_log.log(step, {"critic/rewards/mean": 0.1 * step, "timing_s/step": 30.0})
    run.end_attempt("finished")

    results = tmp_path / "results"
    result = _invoke("--runs-root", str(root), "--results", str(results))
    assert result.exit_code == 0, result.output
    training = read_results(results)["training"].set_index("step")
    assert list(training.index) == [1, 2, 3]
    assert list(training["sampler/responses_total"]) == [72.0, 80.0, 88.0]
    assert list(training["critic/rewards/mean"]) == pytest.approx([0.1, 0.2, 0.3])
    assert (training["sampler/unresolved"] == 2).all()

    csv_out = tmp_path / "sampling.csv"
    assert main(["table", "sampling", "--results", str(results), "--out", str(csv_out)]) == 0
    table = pd.read_csv(csv_out).set_index("method")
    row = table.loc["seq-balance"]
    assert row["responses per step"] == 80.0 and row["responses per prompt"] == 10.0
    assert row["signal share %"] == 50.0 and row["unresolved share %"] == 25.0
    assert row["additional samples per step"] == 16.0
