"""The CPU trainer's async schedule (`--async`, METHOD-async): the next step is sampled by the weights before
this update, in a thread while the update runs; its batch is importance-corrected with verl's own truncated
weights, and it travels in the checkpoint so that a SIGKILL and resume repeat the uninterrupted run exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from test_cpu_run import ROOT, kill_after_steps, read_steps, run_cli

from repro import catalog


def _records(run_dir: Path) -> dict[int, dict]:
    out = {}
    for file in sorted((run_dir / "metrics").glob("attempt-*.jsonl")):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            out[record["step"]] = record["data"]
    return out


def test_async_is_a_variant_of_every_method_and_only_of_methods() -> None:
    for key in catalog.methods():
        variant = catalog.get_method(key + "-async")
        assert variant.asynchronous and variant.base == key and variant.sampler == catalog.get_method(key).sampler
        assert catalog.async_method(key) == key + "-async" == catalog.async_method(key + "-async")
    assert not catalog.get_method("seq-balance").asynchronous
    assert not catalog.is_method("ppo-async") and not catalog.is_method("seq-balance-async-async")


# `repro run` (argv[2:]) with a handshake between each update and the sampling of the next step that must run
# beside it (argv[1]: the last step): the update does not start its work until that sampling has begun, and
# the sampling does not start its work until the update has begun. An async schedule passes at any speed and
# then measures an overlap > 0 by construction; a schedule that sampled after the update (or not at all) would
# wait here and fail at the guard, instead of the test reading whether the OS happened to run the two at once.
_HANDSHAKE = """
import sys, threading
from repro.cli import main
from repro.local.trainer import CpuTrainer

GUARD_S = 120.0  # only a failure guard: a schedule that does not overlap the two waits here forever
LAST = int(sys.argv[1])
update, sample = CpuTrainer._update, CpuTrainer._sample_step
sampling, updating = {}, {}  # step -> threading.Event: its sampling ahead began / its update began

def event(table, step):
    return table.setdefault(step, threading.Event())

def _sample_step(self, step, model, behaviour_logprobs=False):
    if threading.current_thread() is not threading.main_thread():  # sampled ahead, beside step - 1's update
        event(sampling, step).set()
        if not event(updating, step - 1).wait(GUARD_S):
            raise RuntimeError(f"step {step} was sampled ahead but step {step - 1}'s update did not run beside it")
    return sample(self, step, model, behaviour_logprobs)

def _update(self, sampled, staleness=0):
    event(updating, sampled.step).set()
    if sampled.step < LAST and not event(sampling, sampled.step + 1).wait(GUARD_S):
        raise RuntimeError(f"step {sampled.step + 1} was not sampled while step {sampled.step} updated")
    return update(self, sampled, staleness)

CpuTrainer._sample_step, CpuTrainer._update = _sample_step, _update
raise SystemExit(main(sys.argv[2:]))
"""


def test_async_run_is_one_step_stale_corrected_and_overlapped(tiny_env, tmp_path) -> None:
    run_dir = tmp_path / "runs" / "tiny-arith__seq-balance-async__standard__s0"
    args = ["run", "--model", "tiny-arith", "--method", "seq-balance", "--async", "--steps", "4", "--batch", "8"]
    argv = [sys.executable, "-c", _HANDSHAKE, "4", *args, "--runs-root", str(tmp_path / "runs")]
    done = subprocess.run(argv, cwd=ROOT, env=tiny_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["method"] == "seq-balance-async" and config["train"]["async_rollout"] is True
    records = _records(run_dir)
    assert sorted(records) == [1, 2, 3, 4]
    assert [records[s]["async/staleness"] for s in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]
    # step 1 was sampled by the weights it trains: every importance weight is exactly 1
    assert records[1]["rollout_corr/rollout_is_mean"] == 1.0 and records[1]["rollout_corr/rollout_is_max"] == 1.0
    for step in (2, 3, 4):  # sampled one update earlier: the weights differ from 1, truncated at 2
        assert records[step]["rollout_corr/rollout_is_mean"] != 1.0
        assert records[step]["rollout_corr/rollout_is_max"] <= 2.0
    for step in (1, 2, 3):  # the next step was sampled while this one trained (held so by _HANDSHAKE)
        assert records[step]["timing_s/overlap"] > 0.0
        assert records[step]["timing_s/overlap"] <= records[step]["timing_s/gen_ahead"] + 1e-9
    assert "timing_s/overlap" not in records[4]  # nothing left to sample ahead of the last step
    # the pending batch of the next step is in each checkpoint but the last
    kept = sorted((run_dir / "checkpoints").glob("global_step_*"))
    assert (kept[-1] / "pending_step.pt").exists() is False


def test_sync_runs_keep_their_config_and_async_verl_cells_show_their_keys(tiny_env, tmp_path, capsys) -> None:
    from repro import catalog
    from repro.cli import main

    assert main(["run", "--model", "tiny-arith", "--method", "grpo-n4", "--dry-run", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "async_rollout" not in out  # a sync run's config.yaml reads as before the option existed
    args = ["run", "--model", "tiny-arith", "--method", "seq-balance", "--engine", "verl", "--dry-run"]
    assert main([*args, "--set", "trainer.v1.colocate_async.num_warmup_batches=3"]) == 0
    plain = capsys.readouterr().out
    assert "async schedule" not in plain and "trainer_mode=repro_sync" in plain
    assert main([*args, "--async", "--set", "trainer.v1.colocate_async.num_warmup_batches=3"]) == 0
    out = capsys.readouterr().out
    schedule = catalog.async_schedule()
    for key, setting in schedule.items():
        value = str(setting.value).lower() if isinstance(setting.value, bool) else setting.value
        line = next(x for x in out.splitlines() if x.startswith(f"#   {key}="))
        assert f"<- {setting.source}" in line, line  # each key with its reason
        replaced = key == "trainer.v1.colocate_async.num_warmup_batches"
        assert line.endswith("[replaced by --set]") == replaced, line
        if not replaced:
            assert f"{key}={value}" in out.split("# async schedule")[0]  # and in the command verl gets
    resolved = out.split("# resolved verl config")[1]  # verl composed and validated it
    assert "trainer_mode: colocate_async" in resolved or "trainer_mode: repro_colocate_async" in resolved
    assert "max_off_policy_strategy: wait" in resolved and "rollout_is: token" in resolved


@pytest.mark.heavy
@pytest.mark.parametrize("method", ["est"])
def test_kill_and_resume_repeats_the_uninterrupted_async_run(tiny_env, tmp_path, method: str) -> None:
    """SIGKILL after step 3 of 6: the resume updates step 4 on the batch sampled before update 3 (saved in
    the checkpoint), so its weights equal an uninterrupted run's bit for bit (Est: estimator too)."""
    steps = 6
    args = ["run", "--model", "tiny-arith", "--method", method, "--async", "--steps", str(steps), "--batch", "8"]
    killed_dir, straight_dir = tmp_path / "killed", tmp_path / "straight"
    kill_after_steps(tiny_env, [*args, "--run-dir", str(killed_dir)], killed_dir, 3)
    first = read_steps(killed_dir)
    assert first == [1, 2, 3], "the kill lands in step 4, before its update (step 5 being sampled beside it)"
    resumed = run_cli(tiny_env, *args, "--run-dir", str(killed_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(read_steps(killed_dir)) == list(range(1, steps + 1))
    straight = run_cli(tiny_env, *args, "--run-dir", str(straight_dir))
    assert straight.returncode == 0, straight.stderr
    from safetensors.torch import load_file

    final = f"checkpoints/global_step_{steps}/model/model.safetensors"
    a, b = load_file(killed_dir / final), load_file(straight_dir / final)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    resumed_records, straight_records = _records(killed_dir), _records(straight_dir)
    for step in range(len(first) + 1, steps + 1):
        assert resumed_records[step]["async/staleness"] == 1.0  # the saved batch, not a fresh one
        for key in ("critic/rewards/mean", "actor/pg_loss", "rollout_corr/rollout_is_mean", "est/p_hat_mean"):
            assert resumed_records[step][key] == straight_records[step][key], (step, key)
