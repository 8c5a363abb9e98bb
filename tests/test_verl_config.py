"""The GPU path's configs, checked against verl 0.9.1's real config composition and validate_config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from repro import catalog
from repro.cell import resolve_cell
from repro.cli import main
from repro.errors import ReproError
from repro.sampling import SamplerSpec
from repro.sweep import load_sweep
from repro.verl_plugin.config_builder import (
    CHECKPOINT_CALLBACK,
    MANAGER_CLASS,
    VerlCell,
    build_overrides,
    compose,
    compose_and_validate,
)
from repro.verl_plugin.preflight import admission

ROOT = Path(__file__).resolve().parents[1]


def cell(backbone="qwen2.5-math-1.5b", method="seq-balance", prompt_set="standard", preset="paper", **kw) -> VerlCell:
    return VerlCell(
        resolve_cell(backbone, method, prompt_set, 0, preset=preset, engine="verl"),
        train_file="/data/t.parquet",
        val_file="/data/v.parquet",
        run_dir=Path("/runs/x"),
        metrics_file="/runs/x/metrics/attempt-001.jsonl",
        **kw,
    )


@pytest.mark.parametrize("preset", ["paper", "released"])
@pytest.mark.parametrize("sweep_file", ["paper.yaml", "paper-hard.yaml"])
def test_every_cell_of_both_sweeps_composes_and_validates(sweep_file: str, preset: str) -> None:
    sweep = load_sweep(ROOT / "sweeps" / sweep_file)
    cells = sweep.cells()
    assert len(cells) == 28 and {c.prompt_set.key for c in cells} == {sweep.prompt_sets[0]}
    for c in cells:
        cfg = compose_and_validate(
            build_overrides(
                VerlCell(
                    resolve_cell(c.backbone.key, c.method.key, c.prompt_set.key, c.seed, preset=preset),
                    train_file="/t.parquet",
                    val_file="/v.parquet",
                    run_dir=Path("/runs") / c.backbone.key,
                )
            )
        )
        # the real stack's admission rules (repro.verl_plugin.admission): vLLM would start, responses whole
        assert admission(cfg, c.backbone)[0].max_model_len == 3072 == cfg.actor_rollout_ref.rollout.max_model_len
        assert cfg.actor_rollout_ref.rollout.seed == 42 + 1000 * c.seed
        assert cfg.data.train_batch_size == 512
        assert cfg.trainer.total_training_steps == (400 if preset == "released" else 600)
        assert cfg.trainer.experiment_name == f"{c.backbone.key}__{c.method.key}__{c.prompt_set.key}__s0"


def test_the_bench_cells_compose_and_validate_with_their_estimators() -> None:
    """sweeps/paper-bench.yaml: PODS and Knapsack RL through the plugin's reinforce_ada estimator (their own
    baseline and scale per prompt), GRESO through verl's grpo on the groups the plugin's refills kept."""
    cells = load_sweep(ROOT / "sweeps" / "paper-bench.yaml").cells()
    assert len(cells) == 12
    expected = {"pods-16-4": ("reinforce_ada", 4), "knapsack": ("reinforce_ada", 8), "greso": ("grpo", 8)}
    for c in cells:
        cell = VerlCell(c, train_file="/t.parquet", val_file="/v.parquet")
        cfg = compose_and_validate(build_overrides(cell))
        estimator, rollout_n = expected[c.method.key]
        assert (cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.rollout.n) == (estimator, rollout_n)
        assert cfg.algorithm.reinforce_ada.kind == c.method.key.split("-")[0]
        # the manager rebuilds the catalog's spec from the family's own fields alone
        handed = dict(cfg.algorithm.reinforce_ada)
        assert SamplerSpec.from_dict(handed) == catalog.get_method(c.method.key).sampler_spec(seed=c.seed)
        assert not any(key.startswith(("round_size", "n_avg", "exit_rule")) for key in handed)
        assert cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class.endswith("ReinforceAdaAgentLoopManager")
        assert cfg.algorithm.filter_groups.enable is False or c.method.key != "greso"


def test_paper_hyperparameters_reach_verl() -> None:
    cfg = compose_and_validate(build_overrides(cell()))
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert (actor.entropy_coeff, actor.use_kl_loss, cfg.algorithm.use_kl_in_reward) == (1e-4, False, False)
    assert (actor.optim.lr, actor.optim.lr_warmup_steps, actor.optim.weight_decay, actor.optim.clip_grad) == (
        1e-6,
        10,
        0.0,
        1.0,
    )
    assert actor.ppo_mini_batch_size == 128 and actor.use_dynamic_bsz
    rollout = cfg.actor_rollout_ref.rollout
    assert (rollout.name, rollout.temperature, rollout.top_p, rollout.n) == ("vllm", 1.0, 1.0, 4)
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (1024, 2048)
    assert cfg.trainer.total_training_steps == 600 and cfg.trainer.resume_mode == "auto"
    assert cfg.trainer.default_local_dir == "/runs/x/checkpoints"
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.trainer.checkpoint_callback_class == CHECKPOINT_CALLBACK
    assert cfg.reward.custom_reward_function.path == "pkg://repro.reward"
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == "repro.verl_plugin.register"
    assert env.VERL_FILE_LOGGER_PATH == "/runs/x/metrics/attempt-001.jsonl"
    assert cfg.actor_rollout_ref.model.override_config.max_position_embeddings == 32768


def test_method_knobs() -> None:
    seq = compose(build_overrides(cell(method="seq-balance")))
    assert seq.algorithm.adv_estimator == "reinforce_ada"
    assert seq.actor_rollout_ref.rollout.agent.agent_loop_manager_class == MANAGER_CLASS
    ada = OmegaConf.to_container(seq.algorithm.reinforce_ada)
    assert (ada["kind"], ada["exit_rule"], ada["round_size"], ada["max_rounds"], ada["n"]) == (
        "seq",
        "balance",
        8,
        4,
        4,
    )
    assert ada["downsample"] == "random" and ada["global_std_norm"] is False and ada["positive_threshold"] == 0.7
    stream = OmegaConf.to_container(compose(build_overrides(cell(method="seq-pos-stream"))).algorithm.reinforce_ada)
    assert stream["streaming"] is True and stream["exit_rule"] == "pos" and stream["k_pos"] == 1
    g16 = compose(build_overrides(cell(method="grpo-n16")))
    assert g16.algorithm.adv_estimator == "grpo" and g16.actor_rollout_ref.rollout.n == 16
    assert g16.algorithm.norm_adv_by_std_in_grpo is True and "reinforce_ada" not in g16.algorithm
    # DAPO: the plugin's manager runs the core's bounded refills; verl's own group filter stays off
    dapo = compose_and_validate(build_overrides(cell(method="dapo")))
    assert dapo.algorithm.filter_groups.enable is False and dapo.actor_rollout_ref.rollout.n == 4
    assert dapo.algorithm.adv_estimator == "grpo" and dapo.algorithm.norm_adv_by_std_in_grpo is True
    assert dapo.actor_rollout_ref.rollout.agent.agent_loop_manager_class == MANAGER_CLASS
    dapo_spec = OmegaConf.to_container(dapo.algorithm.reinforce_ada)
    assert SamplerSpec.from_dict(dapo_spec) == catalog.get_method("dapo").sampler_spec(seed=0)
    assert (dapo_spec["kind"], dapo_spec["n"], dapo_spec["max_num_gen_batches"]) == ("dapo", 4, 10)
    assert dapo_spec["gen_batch_size"] is None and dapo_spec["on_cap"] == "short"
    assert dapo.data.get("gen_batch_size") is None  # one dataloader batch of train_batch_size per step
    est = compose(build_overrides(cell(method="est")))
    assert est.actor_rollout_ref.rollout.n == 8 and est.algorithm.reinforce_ada.n_max == 32


@pytest.mark.parametrize("preset", ["paper", "released"])
@pytest.mark.parametrize("method", ["seq-pos", "seq-balance", "seq-balance-stream", "est"])
def test_seq_and_est_cells_carry_no_key_nothing_reads(method: str, preset: str) -> None:
    """norm_adv_by_std is GRPO's group-std switch: repro.sampling.step reads it for uniform/dapo only and the
    reinforce_ada estimator reads global_std_norm, so a Seq/Est config must not show it (it did, as true)."""
    overrides = build_overrides(cell(method=method, preset=preset))
    assert not any("norm_adv_by_std" in o for o in overrides)
    ada = OmegaConf.to_container(compose(overrides).algorithm.reinforce_ada)
    assert "norm_adv_by_std" not in ada and ada["global_std_norm"] is False
    assert "norm_adv_by_std_in_grpo" not in " ".join(overrides)  # verl's grpo key is not ours to set here
    # uniform and dapo still read it, through verl's grpo estimator
    for grpo_like in ("grpo-n4", "dapo"):
        assert "algorithm.norm_adv_by_std_in_grpo=true" in build_overrides(cell(method=grpo_like, preset=preset))
    assert "+algorithm.reinforce_ada.norm_adv_by_std=true" in build_overrides(cell(method="dapo", preset=preset))


def test_released_preset_and_resources() -> None:
    rel = compose(build_overrides(cell(preset="released")))
    assert rel.actor_rollout_ref.actor.entropy_coeff == 0 and rel.trainer.total_training_steps == 400
    assert rel.algorithm.reinforce_ada.downsample == "first"
    assert (rel.actor_rollout_ref.actor.clip_ratio_c, rel.data.truncation, rel.trainer.total_epochs) == (
        10.0,
        "left",
        1000,
    )
    big = compose(build_overrides(cell(backbone="qwen2.5-math-7b")))
    assert big.actor_rollout_ref.rollout.tensor_model_parallel_size == 2
    assert big.actor_rollout_ref.actor.fsdp_config.optimizer_offload is True
    llama = compose(build_overrides(cell(backbone="llama-3.2-3b-instruct", prompt_set="hard")))
    assert llama.actor_rollout_ref.model.path == "meta-llama/Llama-3.2-3B-Instruct"
    assert "max_position_embeddings" not in llama.actor_rollout_ref.model.get("override_config", {})
    assert "wandb" in compose(build_overrides(cell(wandb=True))).trainer.logger


def test_a_bad_set_key_is_one_error_line_without_verls_accelerator_warnings(tmp_path) -> None:
    """Importing verl in a command process (no accelerator there) logs two platform warnings; the user sees
    only the project's one line naming the key and verl's fix, and nothing is created."""
    proc = subprocess.run(
        [sys.executable, "-m", "repro.cli", "run", "--model", "tiny-arith", "--method", "seq-balance", "--engine",
         "verl", "--set", "trainer.bogus_key=1", "--runs-root", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: verl rejected the config: Could not override 'trainer.bogus_key'. To append to your config use "
        "+trainer.bogus_key=1"
    ]
    assert not (tmp_path / "runs").exists()


def test_overrides_replace_and_unknown_keys_are_errors() -> None:
    cfg = compose(build_overrides(cell(overrides={"trainer.save_freq": 25, "actor_rollout_ref.rollout.n": 4})))
    assert cfg.trainer.save_freq == 25
    with pytest.raises(ReproError, match="verl rejected the config"):
        compose(build_overrides(cell(overrides={"actor_rollout_ref.actor.no_such_key": 1})))
    # without dynamic batch sizes verl demands micro-batch sizes: its own validation says so
    with pytest.raises(ReproError, match=r"validate_config failed.*micro"):
        compose_and_validate(build_overrides(cell(overrides={"actor_rollout_ref.actor.use_dynamic_bsz": False})))
    with pytest.raises(ReproError, match="unknown preset"):
        build_overrides(cell(preset="fast"))
    # a CPU backbone is a rehearsal of the same cell on verl's trainer (tests/test_verl_cpu_config.py)
    assert "actor_rollout_ref.rollout.name=vllm_cpu" in build_overrides(cell(backbone="tiny-arith"))


def test_checkpoint_hook_through_verls_builder_and_resume(tmp_path) -> None:
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    from repro.sampling import SamplerSpec
    from repro.verl_plugin import state
    from repro.verl_plugin.checkpoint import AdaStateCheckpoint

    cfg = compose(build_overrides(cell(method="est")))
    callback = build_checkpoint_callback(cfg)
    assert isinstance(callback, AdaStateCheckpoint)
    state.reset()
    spec = SamplerSpec.from_dict(OmegaConf.to_container(cfg.algorithm.reinforce_ada))
    est = state.estimator(spec)
    est.update(["7", "8"], np.array([3, 0]), np.array([8, 8]))
    for step in (50, 100):
        folder = tmp_path / f"global_step_{step}"
        folder.mkdir()
        callback.on_save(trainer=None, global_step=step, checkpoint_dir=str(folder))
    expected = est.p_hat(["7", "8"])
    state.reset()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")  # verl's tracker: it resumes step 100
    assert state.restore(tmp_path) == 100
    np.testing.assert_allclose(state.estimator(spec).p_hat(["7", "8"]), expected)
    state.reset()
    (tmp_path / "global_step_150").mkdir()  # verl saved and wrote its tracker, the hook did not run
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("150")
    with pytest.raises(ReproError, match=r"global_step_150.*resume from global_step_100"):
        state.restore(tmp_path)
    state.reset()
    assert state.restore(tmp_path / "nothing") is None


def test_plugin_classes_load_through_verls_own_loader() -> None:
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
    from verl.utils.import_utils import load_class_from_fqn

    from repro.verl_plugin.rollout import AdaWorker

    manager = load_class_from_fqn(MANAGER_CLASS, "AgentLoopManager")
    assert issubclass(manager, AgentLoopManagerTQ)
    assert issubclass(AdaWorker, AgentLoopWorkerTQ.__ray_actor_class__)
    for method in ("ada_begin", "ada_generate", "ada_commit", "_agent_loop_postprocess"):
        assert callable(getattr(AdaWorker, method))


def test_entry_module_runs_verls_hydra_main_with_our_overrides() -> None:
    overrides = build_overrides(cell(method="est"))
    proc = subprocess.run(
        [sys.executable, "-m", "repro.verl_plugin.entry", "--cfg", "job", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    job = OmegaConf.create(proc.stdout)
    assert job.algorithm.adv_estimator == "reinforce_ada" and job.algorithm.reinforce_ada.kind == "est"


def test_dry_run_for_a_gpu_cell(tmp_path, capsys) -> None:
    code = main(
        [
            "run",
            "--model",
            "qwen2.5-math-7b",
            "--method",
            "seq-pos",
            "--runs-root",
            str(tmp_path),
            "--train-file",
            "/d/t.parquet",
            "--val-file",
            "/d/v.parquet",
            "--set",
            "trainer.save_freq=25",
            "--dry-run",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    command = next(line for line in out.splitlines() if line.startswith("python -m repro.verl_plugin.entry"))
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-7B" in command and "trainer.save_freq=25" in command
    assert "data.train_files=/d/t.parquet" in command
    assert "+algorithm.reinforce_ada.exit_rule=pos" in command
    assert "#   model=qwen2.5-math-7b  <- command line" in out
    assert "#   preset=paper  <- catalog default (the paper's values)" in out
    assert "#   engine=verl  <- catalog default (verl for a gpu backbone)" in out
    resolved = OmegaConf.create(out.split("validate_config passed):\n", 1)[1])
    assert resolved.trainer.save_freq == 25 and resolved.actor_rollout_ref.rollout.tensor_model_parallel_size == 2
    assert not any(tmp_path.iterdir())


def test_gpu_run_without_gpu_is_one_clear_line(tmp_path, capsys) -> None:
    assert main(["run", "--model", "qwen2.5-math-1.5b", "--method", "grpo-n4", "--runs-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    # the node's own stack check, its first failure with its fix: here torch's CPU build, not "no GPU"
    assert err.startswith("error: qwen2.5-math-1.5b cannot train on this host: torch 2.13.0")
    assert "setup-venv.sh gpu" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("backbones: [qwen2.5-math-1.5b\nmethods: [", "malformed YAML"),
        ("backbones: [gpt-5]\nmethods: [grpo-n4]\nprompt_sets: [standard]", "unknown backbone 'gpt-5'"),
        ("backbones: [qwen2.5-math-1.5b]\nmethods: [grpo-n4]\nprompt_sets: [standard]\nfoo: 1", "unknown keys"),
        ("backbones: [qwen2.5-math-1.5b]\nmethods: []\nprompt_sets: [standard]", "non-empty list"),
    ],
)
def test_bad_sweep_files(tmp_path, text: str, fragment: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ReproError, match=fragment):
        load_sweep(path)


def test_sweep_cells_are_the_product() -> None:
    sweep = load_sweep(ROOT / "sweeps" / "paper.yaml")
    cells = sweep.cells()
    assert len({(c.backbone.key, c.method.key) for c in cells}) == 28
    assert json.dumps(sorted({c.method.key for c in cells})) == json.dumps(
        sorted(["grpo-n4", "grpo-n8", "grpo-n16", "dapo", "seq-pos", "seq-balance", "est"])
    )
