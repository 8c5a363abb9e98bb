"""The rehearsal goes all the way: the GPU user's path, end to end, on tiny-arith through verl's real trainer.

`repro sweep run` (grpo-n4 and seq-balance, `engine: verl`; the suite's shared sweep, tests/verl_sweep.py),
then `repro eval RUN --all-checkpoints` of each run, `repro collect`, `repro table weighted-average` and
`repro plot reward-curve`, each as the user types it (a subprocess of `python -m repro.cli`). The last two
tests pin the two things this path tripped over: the checkpoint folders verl leaves behind when it drops an
old checkpoint (`--all-checkpoints` took them for checkpoints and stopped), and the sweep launchers' own
folder under the runs root (collect called it a stray folder).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image
from verl_sweep import METHODS, STEPS

BENCHMARKS = {"tiny-math500": 100, "tiny-aime": 46}  # problems per tier
K = 2
# save_freq 1 (repro/catalog/cpu_resources.yaml): a save every step, each keeping its Hugging Face weights; the
# newest 2 whole (hyperparameters.yaml checkpoints_kept), the older ones slimmed to bf16 weights by the plugin
KEPT = list(range(1, STEPS + 1))
WHOLE = [STEPS - 1, STEPS]
CLI = [sys.executable, "-m", "repro.cli"]


def _cli(env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"repro {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _kept_checkpoints(run: Path) -> list[int]:
    """The checkpoints whose Hugging Face folder has weights, i.e. what a GPU user can evaluate or serve."""
    return sorted(
        int(p.name.removeprefix("global_step_"))
        for p in (run / "checkpoints").glob("global_step_*")
        if any((p / "actor" / "huggingface").glob("*.safetensors"))
    )


@pytest.fixture(scope="module")
def env(tiny_home) -> dict:
    return {**os.environ, "REPRO_HOME": str(tiny_home), "COLUMNS": "200"}


def test_sweep_then_eval_every_kept_checkpoint_collect_table_and_plot(verl_sweep, env, tmp_path):
    # --- repro sweep run: both cells trained to the end by verl's trainer, each keeping every save's HF weights
    for method in METHODS:
        line = next(x for x in verl_sweep.stdout.splitlines() if f"tiny-arith__{method}__standard__s0" in x)
        assert "finished" in line, verl_sweep.stdout
    assert "2 finished, 0 failed" in verl_sweep.stdout, verl_sweep.stdout
    runs = {method: verl_sweep.run(method) for method in METHODS}
    for method, run in runs.items():
        status = json.loads((run / "status.json").read_text())
        assert status["state"] == "finished", (method, status)
        assert _kept_checkpoints(run) == KEPT, (method, sorted(p.name for p in (run / "checkpoints").iterdir()))
        hf = json.loads(
            (run / "checkpoints" / f"global_step_{STEPS}" / "actor" / "huggingface" / "config.json").read_text()
        )
        assert hf["dtype"] == "bfloat16"  # verl's hf_model save (fsdp_checkpoint_manager.py) writes bf16 here
        # verl kept every save; the plugin's checkpoint callback slimmed global_step_1 after the save at step 3:
        # its weights alone, in bf16, what evaluation reads; the newest two whole, for a resume
        from repro.rundir.slim import MARKER, read_header

        for folder in (run / "checkpoints").glob("global_step_*"):
            hf = folder / "actor" / "huggingface" / "model.safetensors"
            dtypes = {v["dtype"] for k, v in read_header(hf)[0].items() if k != "__metadata__"}
            if int(folder.name.removeprefix("global_step_")) in WHOLE:
                assert not (folder / MARKER).exists() and (folder / "data.pt").is_file(), folder
                assert any((folder / "actor").glob("optim_world_size_*.pt")) and dtypes == {"F32"}, folder
            else:
                assert json.loads((folder / MARKER).read_text())["state"] == "slimmed", folder
                assert sorted(p.name for p in folder.iterdir()) == ["actor", MARKER], folder
                assert dtypes == {"BF16"}, folder
        log = "".join((verl_sweep.root / ".launch" / f"{run.name}{ext}").read_text() for ext in (".out", ".err"))
        assert "checkpoints: global_step_1 slimmed after the save at step 3" in log, log[-3000:]

    # --- the sweep's evaluation stage (`eval:` checkpoints all): `repro eval RUN --checkpoints all` right after
    # each cell trained, one summary per kept checkpoint, nothing for the dropped one
    assert "evaluations: 2 finished" in verl_sweep.stdout, verl_sweep.stdout
    for run in runs.values():
        out = (verl_sweep.root / ".launch" / f"{run.name}.eval.out").read_text()
        for step in KEPT:
            assert f"step {step}: Ave@{K}" in out, out
        jobs = [json.loads(x) for x in (run / "eval-jobs.jsonl").read_text().splitlines()]
        assert [j["exit_code"] for j in jobs] == [None, 0] and "--checkpoints" in jobs[-1]["argv"]
        assert sorted(p.name for p in (run / "eval").iterdir() if not p.name.startswith(".")) == [
            f"global_step_{s}" for s in KEPT
        ]
        for step in KEPT:
            folder = run / "eval" / f"global_step_{step}"
            summary = json.loads((folder / "summary.json").read_text())
            assert summary["k"] == K
            assert (
                Path(summary["model"]).resolve()
                == (run / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface").resolve()
            )
            assert {n: b["problems"] for n, b in summary["benchmarks"].items()} == BENCHMARKS
            assert {b["samples_per_problem"] for b in summary["benchmarks"].values()} == {K}
            assert 0.0 <= summary["weighted_average"] <= 1.0
            for name, problems in BENCHMARKS.items():
                records = [json.loads(x) for x in (folder / f"{name}.jsonl").read_text().splitlines() if x.strip()]
                assert len(records) == problems * K
                assert {r["sample_index"] for r in records} == set(range(K))

    # --- again: the records are complete, so `repro sweep eval` evaluates nothing; status shows them done
    again = _cli(env, "sweep", "eval", str(verl_sweep.file), "--runs-root", str(verl_sweep.root))
    assert "evaluations: 2 done" in again.stdout, again.stdout
    for run in runs.values():
        assert len((run / "eval-jobs.jsonl").read_text().splitlines()) == 2
    status = _cli(env, "status", "--sweep", str(verl_sweep.file), "--runs-root", str(verl_sweep.root))
    assert "evaluation: 2 done" in status.stdout and status.stdout.count("done ") >= 2, status.stdout

    # --- repro collect: one runs row per cell, every step once, (2 benchmarks + weighted) x 2 checkpoints per run
    results = tmp_path / "results"
    collect = _cli(env, "collect", "--runs-root", str(verl_sweep.root), "--results", str(results))
    assert "not runs" not in collect.stderr, collect.stderr  # the launcher's .launch/ is no stray folder
    assert "skipped" not in collect.stderr and "warning" not in collect.stderr, collect.stderr
    assert f"2 run(s): 2 runs rows, {2 * STEPS} training rows, {2 * len(KEPT) * 3} eval rows" in collect.stdout
    runs_table = pd.read_parquet(results / "runs.parquet").set_index("method")
    assert sorted(runs_table.index) == sorted(METHODS)
    assert set(runs_table["state"]) == {"finished"} and set(runs_table["steps_logged"]) == {STEPS}
    training = pd.read_parquet(results / "training.parquet")
    for method in METHODS:
        assert training[training["method"] == method]["step"].tolist() == list(range(1, STEPS + 1))
    evals = pd.read_parquet(results / "eval.parquet")
    assert len(evals) == len(METHODS) * len(KEPT) * (len(BENCHMARKS) + 1)
    assert set(evals["k"]) == {K} and evals["ave_at_k"].between(0, 1).all()
    for method in METHODS:
        mine = evals[evals["method"] == method]
        assert sorted(set(mine["checkpoint_step"])) == KEPT
        for step in KEPT:
            rows = mine[mine["checkpoint_step"] == step].set_index("benchmark")
            assert rows["problems"].to_dict() == {**BENCHMARKS, "weighted_average": sum(BENCHMARKS.values())}
            summary = json.loads((runs[method] / "eval" / f"global_step_{step}" / "summary.json").read_text())
            assert rows.loc["weighted_average", "ave_at_k"] == pytest.approx(summary["weighted_average"])

    # --- repro table weighted-average: both rows measured, at the final and at an earlier checkpoint
    for checkpoint, step in (("final", STEPS), (str(STEPS - 1), STEPS - 1)):
        table = _cli(
            env,
            "table",
            "weighted-average",
            "--results",
            str(results),
            "--measured-only",
            "--format",
            "csv",
            "--checkpoint",
            checkpoint,
        )
        frame = pd.read_csv(StringIO(table.stdout), dtype=str).set_index("method")
        assert sorted(frame.index) == sorted(METHODS), table.stdout
        for method in METHODS:
            row = frame.loc[method]
            assert row["n_seeds"] == "1"
            summary = json.loads((runs[method] / "eval" / f"global_step_{step}" / "summary.json").read_text())
            measured = float(row["weighted measured"])  # a number, not "—"
            assert 0.0 <= measured <= 100.0
            assert measured == pytest.approx(100 * summary["weighted_average"], abs=0.05)
            for name in BENCHMARKS:
                assert row[f"{name} measured"] not in ("—", "", "nan"), table.stdout
        assert frame.loc["grpo-n4", "delta grpo-n4"] == "0.0"
        assert frame.loc["seq-balance", "delta grpo-n4"] != "—"  # paired by seed with the sweep's grpo-n4
    terminal = _cli(env, "table", "weighted-average", "--results", str(results), "--measured-only")
    for method in METHODS:
        line = next(x for x in terminal.stdout.splitlines() if "tiny-arith" in x and f" {method} " in x)
        cells = line.split()  # backbone, prompt set, method, n_seeds, then the measured numbers
        assert cells[:4] == ["tiny-arith", "standard", method, "1"], line
        assert all(c.replace(".", "", 1).isdigit() for c in cells[4 : 4 + len(BENCHMARKS) + 1]), line

    # --- repro plot reward-curve: a real PNG (and the PDF), with no tiny-arith method missing
    plot = _cli(env, "plot", "reward-curve", "--results", str(results))
    png = results / "figures" / "reward-curve.png"
    assert png.is_file() and (results / "figures" / "reward-curve.pdf").is_file(), plot.stdout + plot.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    with Image.open(png) as image:
        width, height = image.size
        assert width >= 600 and height >= 300, image.size
        assert len(image.convert("RGB").getcolors(1 << 20) or []) > 10  # not a blank canvas
    lacking = [x for x in (plot.stdout + plot.stderr).splitlines() if "backbone tiny-arith" in x]
    assert lacking == [], lacking  # the figure lists what it lacks: nothing for tiny-arith


def test_all_checkpoints_skips_what_verl_dropped_and_still_refuses_a_broken_kept_one(tmp_path):
    """verl's checkpoint manager deletes a dropped checkpoint's actor/ and keeps its data.pt: that folder is
    not a checkpoint to evaluate; a kept one without a Hugging Face folder is still an error."""
    from repro.errors import ReproError
    from repro.evaluation.runner import targets

    run = tmp_path / "tiny-arith__seq-balance__standard__s0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "status.json").write_text('{"state": "finished", "attempts": []}')
    (run / "config.yaml").write_text("cell: tiny-arith__seq-balance__standard__s0\n")
    (run / "checkpoints" / "global_step_1").mkdir()
    (run / "checkpoints" / "global_step_1" / "data.pt").write_bytes(b"")
    for step in (2, 3):
        hf = run / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        (hf / "model.safetensors").write_bytes(b"")  # only its presence is checked before loading
    found = targets(run, all_checkpoints=True)
    assert [t.label for t in found] == ["step 2", "step 3"]
    assert [t.out_dir.name for t in found] == ["global_step_2", "global_step_3"]
    assert [t.backbone for t in found] == ["tiny-arith", "tiny-arith"]
    assert [t.label for t in targets(run, all_checkpoints=False)] == ["step 3"]
    (run / "checkpoints" / "global_step_4" / "actor").mkdir(parents=True)  # kept, but no HF folder
    with pytest.raises(ReproError, match="global_step_4"):
        targets(run, all_checkpoints=True)


def test_collect_does_not_count_the_sweep_launchers_folder_as_a_stray(verl_sweep, tmp_path):
    from repro.report.collect import collect

    runs = tmp_path / "runs"
    shutil.copytree(verl_sweep.root, runs, ignore=shutil.ignore_patterns("checkpoints", "eval"))
    assert (runs / ".launch").is_dir()  # every sweep leaves its logs, records and locks there
    (runs / ".tiny-arith__x__standard__s0.creating-1").mkdir()  # a run being created: still reported
    report = collect(runs, tmp_path / "results")
    assert [name for name, _ in report.not_runs] == [".tiny-arith__x__standard__s0.creating-1"]
    assert sorted(r.method for r in report.runs) == sorted(METHODS)
