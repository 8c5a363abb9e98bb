"""`repro run --until-tokens N`: the run ends at the first step whose cumulative generated tokens reach N, with
that step saved, and a SIGKILL before it resumes to the same step with the uninterrupted run's weights; the
first step to reach each of `keep_tokens` keeps its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from test_cpu_run import kill_after_steps, read_steps, run_cli

from repro.sampling.metrics import GENERATED

BASE = ["run", "--model", "tiny-arith", "--method", "grpo-n4", "--batch", "8"]


def _tokens(run: Path) -> dict[int, int]:
    by_step = {}
    for file in sorted((run / "metrics").glob("attempt-*.jsonl")):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            by_step[record["step"]] = int(record["data"][GENERATED])
    return by_step


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(run / "checkpoints" / f"global_step_{step}" / "model" / "model.safetensors")


def test_a_budget_ends_the_run_at_the_first_step_that_reaches_it_and_a_kill_before_it_resumes_there(
    tiny_env, tmp_path
) -> None:
    straight = tmp_path / "straight"
    done = run_cli(tiny_env, *BASE, "--steps", "4", "--run-dir", str(straight))
    assert done.returncode == 0, done.stderr
    per_step = _tokens(straight)
    assert sorted(per_step) == [1, 2, 3, 4] and min(per_step.values()) > 0
    # exactly the tokens of steps 1-4: step 3 falls short of it, step 4 reaches it (>=), step 5 is never run
    budget = sum(per_step.values())
    milestone = per_step[1] + 1  # first reached at step 2, whose checkpoint save_freq (10) would not keep
    args = [*BASE, "--steps", "6", "--until-tokens", str(budget), "--set", f"keep_tokens=[{milestone}]"]
    run = tmp_path / "budget"
    kill_after_steps(tiny_env, [*args, "--run-dir", str(run)], run, 2)  # killed in step 3, before its update
    assert read_steps(run) == [1, 2]
    resumed = run_cli(tiny_env, *args, "--run-dir", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert read_steps(run) == [1, 2, 3, 4]  # each step once across the kill, and none after the budget
    assert _tokens(run) == per_step  # the same data order and sampling as the run without a budget
    assert f"token budget {budget:,} reached ({budget:,} generated)" in resumed.stdout
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and [a["state"] for a in status["attempts"]] == ["interrupted", "finished"]
    assert status["attempts"][1]["resumed_from_step"] == 2
    saved = sorted(int(p.name.rsplit("_", 1)[1]) for p in (run / "checkpoints").glob("global_step_*"))
    assert saved == [2, 4]  # the budget's step is saved, and is the last; the milestone's is kept through the kill
    a, b = _weights(run, 4), _weights(straight, 4)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    shown = run_cli({**tiny_env, "COLUMNS": "200"}, "status", "--runs-root", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    rows = {x.split()[1]: x for x in shown.stdout.splitlines() if x.startswith("│ ")}
    assert f"{budget:,} / {budget:,} (100%)" in rows["budget"]  # `repro status`: a budget run's progress in tokens
    assert "/" not in rows["straight"]  # and nothing for a run without a budget
    # the budget is in the run's config, so the same command refuses to redo the finished run
    again = run_cli(tiny_env, *args, "--run-dir", str(run))
    assert again.returncode == 2 and again.stderr.startswith("error: ") and "already finished" in again.stderr
