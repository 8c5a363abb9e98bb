"""The CPU path end to end: the PPO step, `repro run`, the run folder, and resume after SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from repro.cli import main
from repro.cpu_lm.model import TinyModelSpec, model_folder

ROOT = Path(__file__).resolve().parents[1]


def test_one_ppo_step_moves_log_probs_with_the_advantage(tiny_home) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from repro.cpu_lm.generate import make_batch, response_logprobs
    from repro.cpu_lm.model import prompt_ids, target_ids
    from repro.local.ppo import PPOSettings, actor_config, ppo_update

    folder = model_folder(TinyModelSpec(), tiny_home)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    prompt = prompt_ids(tok, "What is 3 plus 4?")
    good, bad = target_ids(tok, "\\boxed{7}"), target_ids(tok, "\\boxed{9}")
    batch = make_batch([prompt, prompt], [good, bad], tok.pad_token_id)
    advantages = torch.tensor([[1.0], [-1.0]]) * batch.response_mask
    with torch.no_grad():
        before, _ = response_logprobs(model, batch, with_entropy=False)
    settings = PPOSettings(entropy_coeff=0.0)
    optim = torch.optim.SGD(model.parameters(), lr=0.05)  # plain gradient step: the direction is the test
    metrics = ppo_update(model, optim, batch, advantages, before, actor_config(settings, 2, 2), settings)
    with torch.no_grad():
        after, _ = response_logprobs(model, batch, with_entropy=False)
    digit = good.index(tok.convert_tokens_to_ids("7"))  # the only position where the two responses differ
    assert bad[digit] == tok.convert_tokens_to_ids("9") and good[:digit] == bad[:digit]
    assert after[0, digit] > before[0, digit] + 1e-4, "the positive-advantage answer must become likelier"
    assert after[1, digit] < before[1, digit] - 1e-4, "the negative-advantage answer must become less likely"
    # at the first update old == new, so the ratio is 1: nothing clipped, no KL, loss = -mean(A) = 0
    assert metrics["actor/pg_clipfrac"] == 0.0 and abs(metrics["actor/ppo_kl"]) < 1e-6
    assert metrics["actor/pg_loss"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/grad_norm"] > 0


def run_cli(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "cli.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def read_steps(run_dir: Path) -> list[int]:
    steps = []
    for file in sorted((run_dir / "metrics").glob("attempt-*.jsonl")):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            assert set(record) == {"step", "data"}
            steps.append(record["step"])
    return steps


def kill_after_steps(env: dict, args: list[str], run_dir: Path, steps: int, timeout: float = 240) -> None:
    """`repro ARGS` in a subprocess, SIGKILLed in step `steps` + 1, once it is sampled and before its update,
    with steps 1..`steps` logged and saved. The run holds at that moment (a pause point, REPRO_PAUSE_AT) until
    the kill, so the kill lands there however fast or loaded the machine is, rather than wherever the run got
    to after a poll saw `steps` steps logged. `timeout` is only a failure guard."""
    from repro.rundir.pause import PAUSE_ENV, pause_file

    moment = pause_file(run_dir, "step", steps + 1)
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a pipe nobody reads could stall the run
        proc = subprocess.Popen(
            [sys.executable, "cli.py", *args],
            cwd=ROOT,
            env={**env, PAUSE_ENV: f"step:{steps + 1}"},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            end = time.monotonic() + timeout
            while not moment.exists():
                if proc.poll() is not None:
                    err.seek(0)
                    raise AssertionError(f"the run ended before step {steps + 1}: {err.read().decode()[-3000:]}")
                assert time.monotonic() < end, f"step {steps + 1} not reached within {timeout} s"
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def test_run_writes_the_contract_and_refuses_to_redo(tiny_env, tmp_path) -> None:
    run_dir = tmp_path / "r"
    args = [
        "run",
        "--model",
        "tiny-arith",
        "--method",
        "seq-balance",
        "--steps",
        "3",
        "--batch",
        "8",
        "--run-dir",
        str(run_dir),
    ]
    done = run_cli(tiny_env, *args)
    assert done.returncode == 0, done.stderr
    assert "finished" in done.stdout
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and len(status["attempts"]) == 1
    config = (run_dir / "config.yaml").read_text()
    assert "method: seq-balance" in config and "scaled:" in config and "exit_rule: balance" in config
    assert json.loads((run_dir / "command.json").read_text())["argv"][:2] == ["repro", "run"]
    assert read_steps(run_dir) == [1, 2, 3]
    record = json.loads((run_dir / "metrics" / "attempt-001.jsonl").read_text().splitlines()[-1])["data"]
    for key in (
        "critic/rewards/mean",
        "critic/score/mean",
        "critic/advantages/mean",
        "actor/entropy",
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/grad_norm",
        "response_length/mean",
        "timing_s/gen",
        "timing_s/step",
        "timing_s/update_actor",
        "timing_s/old_log_prob",
        "sampler/responses_total",
        "sampler/zero_variance_frac",
        "sampler/active_after_round_4",
        "sampler/unresolved_missing_pos",
        "sampler/resolved_within_2_rounds",
    ):
        assert key in record, key
    assert record["sampler/update_size"] == 8 * 4  # downsampled to n = 4 per prompt
    assert 8 * 8 <= record["sampler/responses_total"] <= 8 * 32
    assert (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    again = run_cli(tiny_env, *args)
    assert again.returncode == 2
    assert again.stderr.startswith("error: ") and "already finished" in again.stderr
    assert again.stderr.count("\n") == 1


@pytest.mark.heavy
def test_kill_and_resume_keeps_every_step_exactly_once(tiny_env, tmp_path) -> None:
    """SIGKILL mid-run, same command again: resumes from the checkpoint (Est state and RNG included)."""
    steps = 10
    args = ["run", "--model", "tiny-arith", "--method", "est", "--steps", str(steps), "--batch", "8"]
    killed_dir, straight_dir = tmp_path / "killed", tmp_path / "straight"
    kill_after_steps(tiny_env, [*args, "--run-dir", str(killed_dir)], killed_dir, 4)
    first = read_steps(killed_dir)
    assert first == [1, 2, 3, 4], "the kill lands in step 5, before its update"
    status = json.loads((killed_dir / "status.json").read_text())
    assert status["state"] == "running"  # what a SIGKILL leaves behind; readers report it as interrupted
    resumed = run_cli(tiny_env, *args, "--run-dir", str(killed_dir))
    assert resumed.returncode == 0, resumed.stderr
    union = read_steps(killed_dir)
    assert sorted(union) == list(range(1, steps + 1)), union  # every step exactly once
    attempts = json.loads((killed_dir / "status.json").read_text())["attempts"]
    assert [a["state"] for a in attempts] == ["interrupted", "finished"]
    assert attempts[1]["resumed_from_step"] == 4  # every step is saved, so the last logged one
    # the estimator state travelled with the checkpoint: it knows the prompts of every step
    final = killed_dir / "checkpoints" / f"global_step_{steps}"
    est = json.loads((final / "estimator.json").read_text())
    assert len(est["prompts"]["ids"]) > 8 * (steps - 1)
    # and the resumed run is the uninterrupted run, bit for bit
    straight = run_cli(tiny_env, *args, "--run-dir", str(straight_dir))
    assert straight.returncode == 0, straight.stderr
    from safetensors.torch import load_file

    a = load_file(final / "model" / "model.safetensors")
    b = load_file(straight_dir / "checkpoints" / f"global_step_{steps}" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    m_a = json.loads((killed_dir / "metrics" / "attempt-002.jsonl").read_text().splitlines()[-1])["data"]
    m_b = json.loads((straight_dir / "metrics" / "attempt-001.jsonl").read_text().splitlines()[-1])["data"]
    assert m_a["critic/rewards/mean"] == m_b["critic/rewards/mean"]
    assert m_a["est/p_hat_mean"] == m_b["est/p_hat_mean"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "gpt-5", "--method", "grpo-n4"], "unknown backbone 'gpt-5'"),
        (["--model", "tiny-arith", "--method", "ppo"], "unknown method 'ppo'"),
        (["--model", "tiny-arith", "--method", "grpo-n4", "--prompt-set", "easy"], "unknown prompt set 'easy'"),
        (["--model", "tiny-arith", "--method", "grpo-n4", "--batch", "6"], "must be a multiple"),
        (["--model", "tiny-arith", "--method", "grpo-n4", "--engine", "verl", "--extend", "runs/x"], "CPU trainer's"),
    ],
)
def test_bad_run_arguments(args: list[str], fragment: str, capsys, tiny_env) -> None:
    assert main(["run", *args, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and err.count("\n") == 1


def test_not_a_run_and_half_written_run_dirs(tiny_env, tmp_path, capsys) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main(["run", "--model", "tiny-arith", "--method", "grpo-n4", "--run-dir", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert "not a repro run directory" in err and err.count("\n") == 1
    assert (foreign / "notes.txt").read_text() == "mine"
    half = tmp_path / "half"
    half.mkdir()
    (half / "status.json").write_text('{"state": "runn')
    assert main(["run", "--model", "tiny-arith", "--method", "grpo-n4", "--run-dir", str(half)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(half) in err and err.count("\n") == 1
    assert (half / "status.json").read_text() == '{"state": "runn'


def test_dry_run_prints_config_and_writes_nothing(tiny_env, tmp_path, capsys) -> None:
    assert main(["run", "--model", "tiny-arith", "--method", "dapo", "--runs-root", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "tiny-arith__dapo__standard__s0" in out and "kind: dapo" in out and "max_num_gen_batches: 10" in out
    assert "lr:" in out and "paper: 1.0e-06" in out
    # the resolved cell's provenance: what was typed, and what the catalog filled in
    assert "#   method=dapo  <- command line" in out and "#   seed=0  <- catalog default (seed 0)" in out
    assert "#   prompt_set=standard  <- catalog default (the backbone's, catalog/backbones.yaml)" in out
    assert "#   engine=local  <- catalog default (local for a cpu backbone)" in out
    assert not any(tmp_path.iterdir())
