"""What a 600-step verl run meets before and around its training loop (issue 12, d/e/h/i/j and the preflight):
epochs against the training-set size, the Est state verl resumes with, absolute paths, checkpoint retention
and disk, Hydra-safe override values, and the dry run's preflight block."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from repro import catalog
from repro.cell import resolve_cell
from repro.cli import main
from repro.errors import ReproError
from repro.verl_plugin.config_builder import VerlCell, _fmt, build_overrides, compose, compose_and_validate


def parquet(path: Path, rows: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"prompt": [f"q{i}" for i in range(rows)]}), path)
    return path


def cell(train_file: str = "/data/t.parquet", backbone: str = "qwen2.5-math-7b", **kw) -> VerlCell:
    defaults = {"run_dir": Path("/runs/x"), "metrics_file": "/runs/x/metrics/attempt-001.jsonl"}
    return VerlCell(
        resolve_cell(backbone, "seq-balance", "standard", 0, engine="verl"),
        train_file=train_file,
        val_file="/data/v.parquet",
        **{**defaults, **kw},
    )


def steps_verl_runs(total_epochs: int, n_prompts: int, batch: int, total_steps: int) -> int:
    """verl 0.9.1's v1 fit loop: steps_per_epoch = len // batch (drop_last), it stops at the first of
    `current_epoch < total_epochs` and `global_steps <= total_training_steps` to fail."""
    steps_per_epoch = n_prompts // batch
    step, epoch = 1, 0
    while epoch < total_epochs and step <= total_steps:
        step += 1
        epoch = (step - 1) // steps_per_epoch
    return step - 1


# ------------------------------------------------------------------------------- d. total_epochs


@pytest.mark.parametrize(("rows", "epochs"), [(512, 600), (1000, 600), (5000, 67), (20000, 16)])
def test_total_epochs_cover_every_step_of_the_training_set(tmp_path, rows: int, epochs: int) -> None:
    train = parquet(tmp_path / "train.parquet", rows)
    cfg = compose_and_validate(build_overrides(cell(str(train))))
    assert cfg.trainer.total_epochs == epochs == math.ceil(600 / (rows // 512))
    assert steps_verl_runs(cfg.trainer.total_epochs, rows, 512, cfg.trainer.total_training_steps) == 600
    # one epoch fewer would stop early: the count is the fewest that reach step 600
    if epochs > 1:
        assert steps_verl_runs(epochs - 1, rows, 512, 600) < 600


def test_user_batch_and_steps_decide_the_epochs(tmp_path) -> None:
    train = parquet(tmp_path / "train.parquet", 300)
    overrides = {"data.train_batch_size": 100, "trainer.total_training_steps": 10}
    cfg = compose(build_overrides(cell(str(train), overrides=overrides)))
    assert cfg.trainer.total_epochs == 4  # 3 steps per epoch


def test_a_training_set_smaller_than_one_batch_is_one_clear_error(tmp_path) -> None:
    train = parquet(tmp_path / "train.parquet", 100)
    with pytest.raises(ReproError) as info:
        build_overrides(cell(str(train)))
    message = str(info.value)
    assert "100 prompts" in message and "512" in message and "\n" not in message
    assert "data.train_batch_size" in message or "repro data filter" in message


def test_a_missing_training_set_keeps_a_generous_epoch_count() -> None:
    cfg = compose(build_overrides(cell("/no/such/train.parquet")))
    # enough for 600 steps from any set of at least one batch (one step per epoch)
    assert cfg.trainer.total_epochs >= 600
    assert steps_verl_runs(cfg.trainer.total_epochs, 512, 512, 600) == 600


# ------------------------------------------------------------------ e. Est state from verl's resume step


def _est_states(root: Path, steps: list[int]) -> dict[int, np.ndarray]:
    from repro.sampling import SamplerSpec
    from repro.verl_plugin import state

    spec = SamplerSpec.from_dict(catalog.get_method("est").sampler_spec(seed=0).to_dict())
    state.reset()
    expected = {}
    for k, step in enumerate(steps):
        state.estimator(spec).update(["7"], np.array([k + 1]), np.array([8]))
        folder = root / f"global_step_{step}"
        folder.mkdir(parents=True)
        state.save(folder)
        expected[step] = state.estimator(spec).p_hat(["7"])
    state.reset()
    return expected


def test_est_state_is_restored_from_exactly_the_step_verl_resumes(tmp_path) -> None:
    from repro.sampling import SamplerSpec
    from repro.verl_plugin import state

    spec = SamplerSpec.from_dict(catalog.get_method("est").sampler_spec(seed=0).to_dict())
    expected = _est_states(tmp_path, [50, 100, 150])
    # verl's tracker says 100 (a later folder may be a save that never completed): 100 it is
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")
    assert state.restore(tmp_path, resume_mode="auto") == 100
    np.testing.assert_allclose(state.estimator(spec).p_hat(["7"]), expected[100])
    # resume_mode=resume_path: verl loads that folder, whatever the tracker says
    state.reset()
    assert state.restore(tmp_path, resume_mode="resume_path", resume_from_path=str(tmp_path / "global_step_50")) == 50
    np.testing.assert_allclose(state.estimator(spec).p_hat(["7"]), expected[50])
    # no tracker: verl trains from scratch, and so does the estimator, though state files exist
    state.reset()
    (tmp_path / "latest_checkpointed_iteration.txt").unlink()
    assert state.restore(tmp_path, resume_mode="auto") is None
    assert state.restore(tmp_path, resume_mode="disable") is None
    state.reset()


def test_restore_refuses_when_verls_checkpoint_has_no_state_file(tmp_path, caplog) -> None:
    from repro.verl_plugin import state

    _est_states(tmp_path, [50, 100])
    (tmp_path / "global_step_150").mkdir()  # verl saved and wrote its tracker; killed before the hook ran
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("150")
    with caplog.at_level(logging.INFO), pytest.raises(ReproError) as info:
        state.restore(tmp_path, resume_mode="auto")
    assert "global_step_150" in str(info.value) and "global_step_100" in str(info.value)
    assert "\n" not in str(info.value)
    assert any(r.levelno == logging.WARNING and "global_step_150" in r.getMessage() for r in caplog.records)
    state.reset()


# --------------------------------------------------------------------------------- h. absolute paths


def test_checkpoint_folder_and_logger_path_are_absolute(tmp_path, monkeypatch) -> None:
    from repro.cell_config import verl_run
    from repro.launch.attempt import PLACEHOLDER

    monkeypatch.chdir(tmp_path)
    cfg = compose(build_overrides(cell(run_dir=Path("runs/x"), metrics_file="runs/x/metrics/attempt-NNN.jsonl")))
    assert cfg.trainer.default_local_dir == str(tmp_path / "runs" / "x" / "checkpoints")
    logger = cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH
    assert logger == str(tmp_path / "runs" / "x" / "metrics" / "attempt-NNN.jsonl")
    # what `repro run` and the job scripts build: still absolute, and the attempt wrapper still numbers it
    y_cell = resolve_cell("qwen2.5-math-7b", "seq-balance", "standard", 0)
    spec = verl_run(y_cell, Path("runs/y"), train_file=Path("t.parquet"))
    final = [part.replace(PLACEHOLDER, "attempt-003.jsonl") for part in spec.trainer_argv()]
    cfg = compose(final[3:])
    assert cfg.trainer.default_local_dir == str(tmp_path / "runs" / "y" / "checkpoints")
    logger = cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH
    assert logger == str(tmp_path / "runs" / "y" / "metrics" / "attempt-003.jsonl") and os.path.isabs(logger)


# ------------------------------------------------------------------------- i. retention, disk estimate


def test_verl_keeps_every_save_and_the_disk_estimate_counts_k_whole_and_the_rest_in_bf16() -> None:
    from repro.rundir.retention import KEPT_ENV, kept_from_config
    from repro.verl_plugin.preflight import checkpoint_disk

    kept = catalog.hyperparameters()["checkpoints_kept"].value
    assert kept == 2
    cfg = compose_and_validate(build_overrides(cell()))
    # verl keeps every save (its limit would delete whole actor folders of its own process only); the plugin's
    # K reaches the checkpoint callback through the Ray runtime env
    assert cfg.trainer.max_actor_ckpt_to_keep is None and cfg.trainer.max_critic_ckpt_to_keep is None
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars[KEPT_ENV] == "2" and kept_from_config(cfg) == kept
    # hf_model: every kept save is a Hugging Face folder that repro eval and vLLM load as it is
    assert list(cfg.actor_rollout_ref.actor.checkpoint.save_contents) == ["model", "optimizer", "extra", "hf_model"]
    params = catalog.get_backbone("qwen2.5-math-7b").param_count
    assert params == 7_615_616_512
    disk = checkpoint_disk(cfg, params)
    # fp32 weights (verl's model_dtype) + AdamW's two fp32 moments + the fp32 hf_model copy verl writes
    assert disk.bytes_per_param == 16
    assert disk.per_save == params * 16
    # 600 steps, a save every 50: the newest 2 whole, the other 10 as their bf16 weights (2 bytes a param)
    assert (disk.saves, disk.kept, disk.slimmed, disk.per_slim) == (12, 2, 10, params * 2)
    assert disk.total == 2 * params * 16 + 10 * params * 2
    line = disk.line()
    assert "121.8 GB per save; 12 saves: the newest 2 whole (REPRO_CHECKPOINTS_KEPT=2, across allocations)" in line
    assert "the other 10 slimmed to their bf16 Hugging Face weights (2 bytes a param = 15.2 GB each" in line
    assert "= 396.0 GB on disk at most" in line
    without_hf = {"actor_rollout_ref.actor.checkpoint.save_contents": ["model", "optimizer", "extra"]}
    no_hf = checkpoint_disk(compose(build_overrides(cell(overrides=without_hf))), params)
    # nothing to slim to: an older save's FSDP shards are its only weights, so it stays whole
    assert no_hf.bytes_per_param == 12 and no_hf.total == 12 * params * 12 and "left whole" in no_hf.line()
    # a user's verl limit deletes the older saves' weights too: the line says so
    limited = checkpoint_disk(compose(build_overrides(cell(overrides={"trainer.max_actor_ckpt_to_keep": 3}))), params)
    assert "trainer.max_actor_ckpt_to_keep=3 also has verl delete" in limited.line()
    # a config without the plugin's K: what verl's own limit keeps, as verl alone would
    verl_only = {f"+ray_kwargs.ray_init.runtime_env.env_vars.{KEPT_ENV}": None, "trainer.max_actor_ckpt_to_keep": 2}
    alone = checkpoint_disk(compose(build_overrides(cell(overrides=verl_only))), params)
    assert (alone.kept, alone.slimmed, alone.total) == (2, 0, 2 * disk.per_save)
    for key, backbone in catalog.backbones().items():
        if backbone.weights_from_user:  # a model the catalog does not know: no estimate, and none invented
            assert backbone.param_count is None, key
            continue
        assert isinstance(backbone.param_count, int) and backbone.param_count > 0, key


# ------------------------------------------------------------------------------- j. override quoting


@pytest.mark.parametrize(
    "value",
    [
        "a,b",
        "repro.verl_plugin.register,repro.verl_plugin.cpu",
        "two words",
        "it's",
        'say "hi"',
        "true",
        "null",
        "123",
        "1e-3",
        "nan",
        "k=v",
        "[x]",
        "{a: 1}",
        "back\\slash",
        "ends\\",
        "/abs/path/to/file.parquet",
        "pkg://repro.reward",
        "",
    ],
)
def test_override_strings_round_trip_through_hydra(value: str) -> None:
    cfg = compose([f"+trainer.probe={_fmt(value)}"])
    assert cfg.trainer.probe == value and isinstance(cfg.trainer.probe, str)


def test_override_values_of_other_types_round_trip() -> None:
    for value in (8, 1e-6, 0.0, True, False, None, ["console", "file"], ["a,b", "c d"]):
        cfg = compose([f"+trainer.probe={_fmt(value)}"])
        got = cfg.trainer.probe
        assert (list(got) if isinstance(value, list) else got) == value


def test_two_external_modules_compose() -> None:
    key = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES"
    cfg = compose(build_overrides(cell(overrides={key: "repro.verl_plugin.register,extra.module"})))
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == "repro.verl_plugin.register,extra.module"


# ----------------------------------------------------------------------------------------- preflight


def test_preflight_reports_data_gpus_disk_and_the_rehearsal(tmp_path, monkeypatch) -> None:
    import torch

    from repro.verl_plugin.preflight import preflight

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    train = parquet(tmp_path / "train.parquet", 5000)
    cfg = compose(build_overrides(cell(str(train))))
    seven_b = resolve_cell("qwen2.5-math-7b", "seq-balance", "standard")
    report = preflight(cfg, seven_b)
    assert (report.train_prompts, report.batch, report.total_steps, report.steps_per_epoch) == (5000, 512, 600, 9)
    assert report.epochs == 67 and (report.nnodes, report.gpus_per_node, report.cuda_here) == (1, 8, False)
    assert report.disk.per_save == 7_615_616_512 * 16
    assert report.rehearsal == "repro run --model tiny-arith --method seq-balance --engine verl --steps 3"
    text = "\n".join(report.lines())
    assert "5,000 prompts" in text and "600 steps x 512" in text and "67 epochs" in text
    assert "1 node x 8 GPUs" in text and "no CUDA" in text
    assert "121.8 GB per save" in text and "396.0 GB on disk at most" in text
    assert "vLLM max_model_len: 3072 (set explicitly)" in text and "4096 positions" in text and not report.problems
    assert report.rehearsal in text

    missing = compose(build_overrides(cell("/no/such/train.parquet")))
    report = preflight(missing, seven_b)
    assert report.train_prompts is None
    text = "\n".join(report.lines())
    assert "/no/such/train.parquet does not exist" in text
    assert "repro data filter --model qwen2.5-math-7b --pass-rate 0.3125" in text


def test_dry_run_prints_the_preflight_before_the_resolved_config(tmp_path, capsys) -> None:
    train = parquet(tmp_path / "d" / "train.parquet", 2048)
    code = main(
        [
            "run",
            "--model",
            "qwen2.5-math-7b",
            "--method",
            "est",
            "--runs-root",
            str(tmp_path / "runs"),
            "--train-file",
            str(train),
            "--val-file",
            str(tmp_path / "d" / "val.parquet"),
            "--dry-run",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.index("# preflight") < out.index("# resolved verl config")
    assert "2,048 prompts" in out and "150 epochs" in out and "trainer.total_epochs=150" in out
    assert "repro run --model tiny-arith --method est --engine verl --steps 3" in out
    assert not (tmp_path / "runs").exists()
