"""`generic`: the catalog's settings for a model it does not know. It trains only with the user's weights and
prompts, composes through verl's real config with the paper's hyperparameters and conservative resources, and
every command that would need weights of its own refuses in one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from transformers import LlamaConfig

from repro import catalog
from repro.cli import main


@pytest.fixture
def user_model(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A model folder with a real config (verl's admission reads its positions) and a 4-prompt verl Parquet."""
    monkeypatch.setenv("REPRO_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "My_Model-v2"
    LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=1000, max_position_embeddings=4096,
    ).save_pretrained(folder)  # fmt: skip
    rows = [
        {
            "data_source": "mine",
            "prompt": [{"role": "user", "content": f"What is {i} plus 1?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
            "extra_info": {"index": i, "split": "train"},
        }
        for i in range(4)
    ]
    train = tmp_path / "mine.parquet"
    pd.DataFrame(rows).to_parquet(train, index=False)
    return folder, train


def test_generic_trains_the_users_model_with_the_papers_settings(user_model, capsys) -> None:
    folder, train = user_model
    args = ["run", "--model", "generic", "--method", "seq-balance", "--model-path", str(folder)]
    assert main([*args, "--train-file", str(train), "--batch", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# run folder: runs/generic+My_Model-v2__seq-balance__standard__s0" in out
    command = next(line for line in out.splitlines() if line.startswith("python -m repro.verl_plugin.entry"))
    values = dict(item.strip("'").split("=", 1) for item in command.split()[3:])
    assert values["actor_rollout_ref.model.path"] == str(folder.resolve())
    assert values["data.train_files"] == values["data.val_files"] == str(train)  # no filtered set of its own
    resources = catalog.gpu_resources("generic")
    assert values["actor_rollout_ref.actor.fsdp_config.param_offload"] == "true"
    assert values["actor_rollout_ref.rollout.gpu_memory_utilization"] == str(
        resources["rollout.gpu_memory_utilization"].value
    )
    assert values["actor_rollout_ref.actor.optim.lr"] == "1e-06"  # the paper's, as for the catalog's models
    assert values["algorithm.adv_estimator"] == "reinforce_ada"
    # 4 prompts a step, 600 steps: the epoch count verl needs, read from the user's file
    assert values["trainer.total_epochs"] == "600" and values["data.train_batch_size"] == "4"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["run", "--model", "generic", "--method", "grpo-n4", "--dry-run"], "add --model-path DIR_OR_HUB_ID"),
        (["data", "filter", "--model", "generic"], "no weights to sample pass rates from"),
        (["eval", "generic", "--benchmarks", "tiny-math500"], "pass your model's folder with --model-path"),
    ],
)
def test_what_needs_weights_of_its_own_refuses_generic_in_one_line(argv, fragment, user_model, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and err.count("\n") == 1


def test_a_sweep_of_generic_is_refused_before_any_cell(user_model, tmp_path, capsys) -> None:
    sweep = tmp_path / "mine.yaml"
    sweep.write_text("name: mine\nbackbones: [generic]\nmethods: [seq-balance]\nprompt_sets: [standard]\n")
    assert main(["sweep", "run", str(sweep), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "generic has no weights of its own" in err and "--model-path" in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()
