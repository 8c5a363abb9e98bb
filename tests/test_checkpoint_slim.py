"""verl cells keep every save's weights and only the newest K saves whole (repro.rundir.slim, driven by
repro.rundir.retention): older saves' fp32 Hugging Face weights rewritten in bf16, their resume-only parts
deleted, never the save the tracker names, never under a live evaluation's lock; the attempt wrapper does it
before the trainer starts; evaluation finds and loads every save."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from verl_layout import RESUME_PARTS, TRACKER, fingerprint, weights, write_save

from repro.evaluation.shards import eval_lock, eval_lock_holder
from repro.launch.attempt import run_attempt
from repro.launch.eval_stage import kept_steps
from repro.rundir import RunDir
from repro.rundir.retention import KEPT_OVERRIDE, kept_from_env, kept_from_overrides, retain
from repro.rundir.slim import MARKER, data_bytes, slim_save


def _run(tmp_path: Path, steps: range, tracked: int, sharded: tuple[int, ...] = ()) -> Path:
    run = tmp_path / "tiny-arith__seq-balance__standard__s0"
    for step in steps:
        write_save(run / "checkpoints", step, sharded=step in sharded)
    (run / "checkpoints" / TRACKER).write_text(str(tracked))  # verl writes it bare, no newline
    (run / "status.json").write_text(json.dumps({"state": "finished"}))
    (run / "config.yaml").write_text(f"cell: {run.name}\n")
    return run


def _loaded(hf: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for file in sorted(hf.glob("*.safetensors")):
        out.update(load_file(file))
    return out


def _weight_bytes(save: Path) -> int:
    return sum(data_bytes(f) for f in (save / "actor" / "huggingface").glob("*.safetensors"))


def _fp32_bytes(step: int) -> int:
    return sum(t.numel() * 4 for t in weights(step).values() if t.dtype == torch.float32)


def test_older_saves_keep_their_weights_in_bf16_and_the_newest_and_tracked_stay_whole(tmp_path) -> None:
    run = _run(tmp_path, range(1, 6), tracked=2, sharded=(3,))
    ckpt = run / "checkpoints"
    whole = {s: fingerprint(ckpt / f"global_step_{s}") for s in (2, 4, 5)}
    before = {s: sum(size for size, _ in fingerprint(ckpt / f"global_step_{s}").values()) for s in (1, 3)}
    weights_before = {s: _weight_bytes(ckpt / f"global_step_{s}") for s in (1, 3)}

    lines = retain(ckpt, 2, "in the test")
    # the newest 2 (4, 5) and the tracker's (2, older than them) untouched, byte for byte
    assert {s: fingerprint(ckpt / f"global_step_{s}") for s in (2, 4, 5)} == whole
    assert [line.split(" slimmed")[0] for line in lines] == [
        "repro: checkpoints: global_step_1",
        "repro: checkpoints: global_step_3",
    ], lines
    for step in (1, 3):
        save = ckpt / f"global_step_{step}"
        hf = save / "actor" / "huggingface"
        # resume-only parts gone; what evaluation reads (config, tokenizer, weights) stays
        assert sorted(p.name for p in save.iterdir()) == ["actor", MARKER]
        assert [p.name for p in (save / "actor").iterdir()] == ["huggingface"]
        assert not any((save / part).exists() for part in RESUME_PARTS)
        assert (hf / "config.json").is_file() and (hf / "tokenizer_config.json").is_file()
        # every value equals torch's bf16 cast of the fp32 one; the int64 buffer is copied as it was
        original, slimmed = weights(step), _loaded(hf)
        assert slimmed.keys() == original.keys()
        for name, tensor in original.items():
            want = tensor.to(torch.bfloat16) if tensor.dtype == torch.float32 else tensor
            assert slimmed[name].dtype == want.dtype and torch.equal(slimmed[name], want), name
        # the weights take half the bytes of their fp32 part
        after = _weight_bytes(save)
        assert after == weights_before[step] - _fp32_bytes(step) // 2
        marker = json.loads((save / MARKER).read_text())
        assert marker["state"] == "slimmed" and marker["dtype"] == "bfloat16" and marker["why"] == "in the test"
        assert marker["bytes_before"] == before[step]
        assert marker["bytes_after"] == sum(size for name, (size, _) in fingerprint(save).items() if name != MARKER)
        assert sorted(marker["removed"]) == sorted(RESUME_PARTS)
        sizes = f"{marker['bytes_before']} -> {marker['bytes_after']} bytes on disk"
        print(f"global_step_{step}: {sizes}; weights {weights_before[step]} -> {after}")
    index = json.loads((ckpt / "global_step_3/actor/huggingface/model.safetensors.index.json").read_text())
    hf3 = ckpt / "global_step_3/actor/huggingface"
    assert index["metadata"]["total_size"] == sum(data_bytes(f) for f in hf3.glob("*.safetensors"))
    assert set(index["weight_map"].values()) == {p.name for p in hf3.glob("*.safetensors")}
    # idempotent: a second pass changes nothing and says nothing
    again = {s: fingerprint(ckpt / f"global_step_{s}") for s in range(1, 6)}
    assert retain(ckpt, 2, "again") == []
    assert {s: fingerprint(ckpt / f"global_step_{s}") for s in range(1, 6)} == again
    # evaluation still finds every save, each with Hugging Face weights to load
    from repro.evaluation.runner import missing_weights, targets

    assert kept_steps(run) == [1, 2, 3, 4, 5]
    found = targets(run, checkpoints="all")
    assert [t.step for t in found] == [1, 2, 3, 4, 5]
    assert all(missing_weights(Path(t.model_path)) is None for t in found)


def test_nothing_is_slimmed_while_an_evaluation_holds_the_run_eval_lock(tmp_path) -> None:
    run = _run(tmp_path, range(1, 4), tracked=3)
    ckpt = run / "checkpoints"
    old = fingerprint(ckpt / "global_step_1")
    assert eval_lock_holder(run / "eval") is None  # no lock file yet
    with eval_lock(run / "eval"):
        import os

        assert eval_lock_holder(run / "eval") == str(os.getpid())
        (line,) = retain(ckpt, 2, "after the save at step 3")
        assert fingerprint(ckpt / "global_step_1") == old and not (ckpt / "global_step_1" / MARKER).exists()
        assert "1 older save(s) (step 1) not slimmed after the save at step 3" in line
        assert f"(pid {os.getpid()}) holds {run / 'eval' / '.eval.lock'}" in line
    assert eval_lock_holder(run / "eval") is None  # the probe never took the lock itself
    (line,) = retain(ckpt, 2, "at the start of attempt 2")
    assert line.startswith("repro: checkpoints: global_step_1 slimmed at the start of attempt 2: ")
    assert json.loads((ckpt / "global_step_1" / MARKER).read_text())["state"] == "slimmed"


def test_a_slim_cut_short_is_finished_by_the_next_call(tmp_path) -> None:
    run = _run(tmp_path, range(1, 4), tracked=3)
    save = run / "checkpoints" / "global_step_1"
    first = sum(size for size, _ in fingerprint(save).values())
    # killed mid-way: the marker says so, a temp file of the rewrite and the resume parts are still there
    (save / MARKER).write_text(json.dumps({"state": "slimming", "bytes_before": first, "started": "then"}))
    (save / "actor/huggingface/.model.safetensors.x1y2.tmp").write_bytes(b"half a file")
    done = slim_save(save, "again")
    assert done.bytes_before == first and done.weight_files == 1
    assert not list(save.rglob("*.tmp")) and sorted(p.name for p in save.iterdir()) == ["actor", MARKER]
    assert json.loads((save / MARKER).read_text())["started"] == "then"
    assert slim_save(save, "third") == done  # a slimmed save is returned as it is


def test_no_hf_weights_no_retention_and_k_from_the_trainer_command(tmp_path) -> None:
    run = _run(tmp_path, range(1, 4), tracked=3)
    ckpt = run / "checkpoints"
    for f in (ckpt / "global_step_1/actor/huggingface").glob("*.safetensors"):
        f.unlink()  # saved without hf_model: the FSDP shards are the only weights
    old = fingerprint(ckpt / "global_step_1")
    (line,) = retain(ckpt, 2, "now")
    assert "step 1 hold no Hugging Face weights" in line and fingerprint(ckpt / "global_step_1") == old
    assert retain(ckpt, None, "now") == []  # a config without the plugin's K: verl's own retention only
    assert kept_from_overrides(["a=1", f"{KEPT_OVERRIDE}='3'", "b=2"]) == 3
    assert kept_from_overrides([f"{KEPT_OVERRIDE.lstrip('+')}=2", f"{KEPT_OVERRIDE}=4"]) == 4  # the last wins
    assert kept_from_overrides(["trainer.max_actor_ckpt_to_keep=2"]) is None
    assert kept_from_env({"REPRO_CHECKPOINTS_KEPT": "2"}) == 2 and kept_from_env({}) is None
    assert kept_from_env({"REPRO_CHECKPOINTS_KEPT": "0"}) is None


SEEN_AT_START = """
import json, pathlib, sys
ckpt = pathlib.Path(sys.argv[1]) / "checkpoints"
seen = {p.name: (p / "slimmed.json").exists() for p in sorted(ckpt.glob("global_step_*"))}
(ckpt.parent / "seen-at-start.json").write_text(json.dumps(seen))
"""


def test_an_attempt_slims_what_earlier_attempts_left_before_its_trainer_starts(tmp_path, capsys) -> None:
    run = RunDir.prepare(tmp_path / "run", {"a": 1}, ["repro", "run"])
    for step in range(1, 5):  # four saves of earlier attempts (each verl process pruned only its own)
        write_save(run.checkpoints_dir, step)
    trainer = [sys.executable, "-c", SEEN_AT_START, str(run.path), "trainer.save_freq=1", f"{KEPT_OVERRIDE}='2'"]
    assert run_attempt(run, trainer) == 0
    seen = json.loads((run.path / "seen-at-start.json").read_text())
    assert seen == {"global_step_1": True, "global_step_2": True, "global_step_3": False, "global_step_4": False}
    out = capsys.readouterr().out
    assert "global_step_1 slimmed at the start of attempt 1" in out and "global_step_2 slimmed" in out
    assert run.status()["attempts"][-1]["resumed_from_step"] == 4  # the tracker's save, whole, resumed
    # a trainer command without the plugin's K (not repro's config): the attempt leaves the saves alone
    write_save(run.checkpoints_dir, 5)
    old = fingerprint(run.checkpoints_dir / "global_step_3")
    assert run_attempt(run, trainer[:-1]) == 0
    assert fingerprint(run.checkpoints_dir / "global_step_3") == old


def test_repro_eval_loads_a_slimmed_save_in_bf16(tiny_env, tmp_path) -> None:
    """A real model folder (the suite's tiny-arith model, fp32 safetensors) as an older verl save: slimmed,
    then loaded by `repro eval`'s transformers backend; its parameters are the bf16 cast of the fp32 ones."""
    from repro.cli import main
    from repro.evaluation.transformers_generator import TransformersGenerator

    model = next(p for p in (Path(tiny_env["REPRO_HOME"]) / "models").iterdir() if (p / "config.json").is_file())
    original = load_file(model / "model.safetensors")
    assert {t.dtype for t in original.values()} == {torch.float32}
    run = tmp_path / "tiny-arith__seq-balance__standard__s0"
    for step in (1, 2, 3):
        hf = run / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface"
        shutil.copytree(model, hf)
        (hf.parent / "optim_world_size_1_rank_0.pt").write_bytes(b"0" * 1000)
    (run / "checkpoints" / TRACKER).write_text("3")
    (run / "status.json").write_text(json.dumps({"state": "finished"}))
    (run / "config.yaml").write_text("cell: tiny-arith__seq-balance__standard__s0\n")
    size = (model / "model.safetensors").stat().st_size
    assert len(retain(run / "checkpoints", 2, "in the test")) == 1
    hf = run / "checkpoints" / "global_step_1" / "actor" / "huggingface"
    slim_size = (hf / "model.safetensors").stat().st_size
    print(f"tiny-arith model.safetensors: {size} -> {slim_size} bytes")
    assert slim_size < 0.51 * size
    generator = TransformersGenerator(hf, max_new_tokens=4)
    params = dict(generator.model.named_parameters())
    for name, tensor in original.items():
        if name in params:
            assert torch.equal(params[name].detach(), tensor.to(torch.bfloat16).to(torch.float32)), name
    argv = ["eval", str(run), "--checkpoints", "1", "--benchmarks", "tiny-math500", "--first-problems", "2"]
    assert main([*argv, "--k", "2"]) == 0
    summary = json.loads((run / "eval" / "global_step_1" / "summary.json").read_text())
    assert Path(summary["model"]).resolve() == hf.resolve() and summary["k"] == 2
    assert summary["benchmarks"]["tiny-math500"]["problems"] == 2


@pytest.mark.parametrize("keep", [0, -1])
def test_keep_must_leave_the_save_a_resume_loads(tmp_path, keep: int) -> None:
    from repro.rundir.slim import to_slim

    with pytest.raises(ValueError, match="keep must be at least 1"):
        to_slim(tmp_path, keep)
