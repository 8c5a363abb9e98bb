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


def test_extend_trains_a_finished_run_on_to_a_budget_bit_for_bit_in_a_folder_of_its_own(tiny_env, tmp_path) -> None:
    straight = tmp_path / "straight"
    done = run_cli(tiny_env, *BASE, "--steps", "4", "--run-dir", str(straight))
    assert done.returncode == 0, done.stderr
    per_step = _tokens(straight)
    budget = sum(per_step.values())  # reached at step 4
    runs = tmp_path / "runs"
    reference = runs / "tiny-arith__grpo-n4__standard__s0"
    first = run_cli(tiny_env, *BASE, "--steps", "2", "--runs-root", str(runs))
    assert first.returncode == 0, first.stderr
    before = {
        p.relative_to(reference): p.read_bytes() for p in reference.rglob("*") if p.is_file() and "lock" not in p.name
    }
    args = [*BASE, "--extend", str(reference), "--until-tokens", str(budget), "--steps", "6", "--runs-root", str(runs)]
    longer = run_cli(tiny_env, *args)
    assert longer.returncode == 0, longer.stderr
    assert f"starting from {reference}'s checkpoint of step 2" in longer.stderr
    run = runs / "tiny-arith__grpo-n4__standard__s0__matched"
    assert read_steps(run) == [1, 2, 3, 4]  # the reference's two steps (copied), then its own, to the budget
    assert _tokens(run) == per_step
    a, b = _weights(run, 4), _weights(straight, 4)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # the straight 4-step run's weights
    epochs = [
        json.loads(line)["data"]["training/epochs_seen"]
        for file in sorted((run / "metrics").glob("attempt-*.jsonl"))
        for line in file.read_text().splitlines()
    ]
    assert epochs == sorted(epochs) and epochs[0] > 0  # passes over the prompt set, growing
    after = {
        p.relative_to(reference): p.read_bytes() for p in reference.rglob("*") if p.is_file() and "lock" not in p.name
    }
    assert after == before  # the reference run is read, never written
    # anything but how long the run goes makes it another run: refused in one line, nothing created
    other = run_cli(tiny_env, *args[:-2], "--set", "lr=0.001", "--run-dir", str(tmp_path / "other"))
    assert other.returncode == 2 and other.stderr.startswith("error: ") and "only total_training_steps" in other.stderr
    assert not (tmp_path / "other").exists()
    unfinished = run_cli(tiny_env, *BASE, "--extend", str(tmp_path / "nowhere"), "--until-tokens", "9")
    assert unfinished.returncode == 2 and "not a run folder" in unfinished.stderr


def test_verls_trainer_ends_at_the_first_step_whose_generated_tokens_reach_the_budget(tmp_path, monkeypatch) -> None:
    """The plugin's trainer hook (`repro run --engine verl --until-tokens N`), its hooks only as
    test_slurm_continuation's stop test drives them: verl's `_compute_metrics` stubbed to the one metric the rule
    reads; the tokens of earlier steps come from the run folder's metrics files, as verl and the plugin write
    them."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from repro.rundir import MetricsWriter, sampler_file
    from repro.verl_plugin.stop_trainer import StopAtBoundaryTrainer

    def verl_metrics(self, batch, metrics, timing_raw, global_steps, epoch) -> None:
        metrics["response_length/mean"] = 10.0

    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", verl_metrics)
    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    line = run / "metrics" / "attempt-001.jsonl"
    saves: list[int] = []

    def trainer(budget: int, save_freq: int) -> StopAtBoundaryTrainer:
        t = object.__new__(StopAtBoundaryTrainer)  # its hooks only: no Ray, no workers
        t.config = OmegaConf.create({"trainer": {"save_freq": save_freq, "until_tokens": budget}})
        t.run_dir, t.stopped_at, t.timing_raw, t.until_tokens = run, None, {}, budget
        t.total_training_steps = 20
        t._save_checkpoint = lambda: saves.append(t.global_steps)
        return t

    # GRPO: no manager, so a step's tokens are its batch's: 8 rows (a padding row left out) x 10 tokens
    batch = SimpleNamespace(tags=[{}] * 8 + [{"is_padding": True}])
    grpo = trainer(budget=200, save_freq=5)
    with MetricsWriter(line) as log:
        for step in (1, 2, 3):
            grpo.global_steps, metrics = step, {}
            grpo._compute_metrics(batch, metrics, grpo.timing_raw, step, 0)
            assert metrics[GENERATED] == 80.0  # added to verl's own line, which collect reads
            log.log(step, metrics)
            if step < 3:  # 80, 160: under the budget, verl's loop goes on
                assert (saves, grpo.total_training_steps) == ([], 20)
    assert (saves, grpo.total_training_steps) == ([3], 3)  # 240 >= 200: saved at step 3 (not a save_freq step), last
    # a managed method: the manager's count is in the sampler file before verl trains the step's batch
    line.unlink()
    seq = trainer(budget=300, save_freq=2)
    verl_line = run / "metrics" / "attempt-002.jsonl"
    with MetricsWriter(sampler_file(verl_line)) as sampled, MetricsWriter(verl_line) as log:
        for step in (1, 2):
            sampled.log(step, {GENERATED: 150.0})
            seq.global_steps, metrics = step, {}
            seq._compute_metrics(batch, metrics, seq.timing_raw, step, 0)
            assert GENERATED not in metrics  # counted once, where the manager logged it
            log.log(step, metrics)  # verl's line, logged after `_compute_metrics`
    assert (saves, seq.total_training_steps) == ([3], 2)  # step 2 reaches 300; saved by verl's loop (save_freq 2)
