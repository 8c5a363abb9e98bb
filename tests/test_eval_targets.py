"""`repro eval` of targets that cannot be loaded: one `error:` line naming the folder and the fix, exit 2, no
traceback, nothing generated (verl checkpoints saved without hf_model, missing shards, torn files)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_errors import one_error

from repro.cli import main


def _model(tiny_home: Path) -> Path:
    return next(p for p in (tiny_home / "models").iterdir() if (p / "config.json").is_file())


def _verl_run(root: Path, tiny_home: Path, *, weights: bool) -> Path:
    """A run folder as verl 0.9.1 leaves it: FSDP shards in actor/, config + tokenizer in actor/huggingface,
    and the weights there only when hf_model was saved."""
    run = root / "tiny-arith__seq-balance__standard__s0"
    hf = run / "checkpoints" / "global_step_2" / "actor" / "huggingface"
    shutil.copytree(_model(tiny_home), hf)
    (hf.parent / "model_world_size_1_rank_0.pt").write_bytes(b"fsdp shard")
    if not weights:
        for f in hf.glob("*.safetensors"):
            f.unlink()
    (run / "status.json").write_text(json.dumps({"state": "finished"}))
    (run / "config.yaml").write_text("cell: tiny-arith__seq-balance__standard__s0\n")
    return run


def test_a_verl_checkpoint_without_hf_weights_names_verls_merger(tiny_env, tmp_path, capsys) -> None:
    run = _verl_run(tmp_path, Path(tiny_env["REPRO_HOME"]), weights=False)
    line = one_error(main(["eval", str(run), "--k", "2", "--benchmarks", "tiny-math500"]), capsys.readouterr().err)
    actor = run / "checkpoints" / "global_step_2" / "actor"
    assert f"{actor / 'huggingface'} holds no model weights" in line
    merge = f"python -m verl.model_merger merge --backend fsdp --local_dir {actor} --target_dir {actor}/huggingface"
    assert merge in line
    assert not (run / "eval").exists()  # nothing generated, nothing written


def test_a_verl_checkpoint_with_hf_weights_passes_the_check(tiny_env, tmp_path) -> None:
    from repro.evaluation.runner import missing_weights, targets

    run = _verl_run(tmp_path, Path(tiny_env["REPRO_HOME"]), weights=True)
    (target,) = targets(run, all_checkpoints=False)
    assert target.model_path == run / "checkpoints" / "global_step_2" / "actor" / "huggingface"
    assert missing_weights(Path(target.model_path)) is None


def test_a_missing_shard_of_a_sharded_model(tiny_env, tmp_path, capsys) -> None:
    model = tmp_path / "sharded"
    shutil.copytree(_model(Path(tiny_env["REPRO_HOME"])), model)
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    line = one_error(main(["eval", str(model), "--k", "2", "--benchmarks", "tiny-math500"]), capsys.readouterr().err)
    assert "lacks 1 weight shard(s)" in line and "model-00002-of-00002.safetensors" in line


@pytest.mark.parametrize("broken", ["config.json", "model.safetensors"])
def test_torn_files_are_one_line(broken: str, tiny_env, tmp_path, capsys) -> None:
    model = tmp_path / "torn"
    shutil.copytree(_model(Path(tiny_env["REPRO_HOME"])), model)
    (model / broken).write_text("{torn")
    line = one_error(main(["eval", str(model), "--k", "2", "--benchmarks", "tiny-math500"]), capsys.readouterr().err)
    assert f"cannot load the model in {model}" in line and "complete Hugging Face model" in line


def test_the_cpu_backend_evaluates_a_verl_checkpoint_in_fp32(tiny_env, tmp_path) -> None:
    """verl's hf_model save says bfloat16 in config.json over fp32 tensors; the CPU backend runs fp32, as the
    trainer and the CPU rollout server do, not what the config says."""
    import torch

    from repro.evaluation.transformers_generator import TransformersGenerator

    model = tmp_path / "verl-style"
    shutil.copytree(_model(Path(tiny_env["REPRO_HOME"])), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "dtype": "bfloat16"}))
    generator = TransformersGenerator(model, max_new_tokens=4)
    assert {p.dtype for p in generator.model.parameters()} == {torch.float32}
