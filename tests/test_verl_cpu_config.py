"""The CPU rehearsal's override list: the GPU cell's list with the CPU resources (data) on top."""

from __future__ import annotations

import pytest

from repro import catalog
from repro.cell import resolve_cell
from repro.overrides import runtime_env_vars
from repro.verl_plugin.config_builder import CPU_MODULE, PLUGIN_MODULE, VerlCell, build_overrides, compose_and_validate


def compose_value(cfg, key: str):
    node = cfg
    for part in key.lstrip("+").split("."):
        node = node[part]
    return node


def _values(overrides: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in overrides)


@pytest.mark.parametrize("method", ["seq-balance", "est", "grpo-n4", "dapo", "seq-pos-stream"])
def test_cpu_cell_composes_and_validates_with_cpu_resources(method) -> None:
    cell = resolve_cell("tiny-arith", method, "standard", 0, engine="verl")
    overrides = build_overrides(VerlCell(cell, train_file="t.parquet", val_file="v.parquet", model_path="/m"))
    cfg = compose_and_validate(overrides)
    assert cfg.trainer.device == "cpu" and cfg.actor_rollout_ref.rollout.name == "vllm_cpu"
    assert cfg.actor_rollout_ref.model.path == "/m"
    assert cfg.trainer.n_gpus_per_node == 1 and cfg.reward.num_workers == 1
    # the CPU trainer's scaled values, not the paper's GPU ones
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(3e-4)
    assert cfg.data.max_prompt_length == 48 and cfg.data.max_response_length == 16
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_PLATFORM == "cpu"
    modules = env.VERL_USE_EXTERNAL_MODULES
    assert modules.split(",") == [PLUGIN_MODULE, CPU_MODULE]  # the comma survives Hydra
    # every CPU override from the catalog is in the list with its value
    _, cpu = catalog.cpu_resources("tiny-arith")
    for key, setting in cpu.items():
        assert compose_value(cfg, key) == setting.value, key
    # verl's own engine config takes the fp32 compute (its FSDP engine reads mixed_precision from it)
    from verl.utils.config import omega_conf_to_dataclass

    engine = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor.fsdp_config)
    assert dict(engine.mixed_precision) == {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def test_gpu_cell_never_loads_the_cpu_module() -> None:
    overrides = build_overrides(VerlCell(resolve_cell("qwen2.5-math-7b", "seq-balance", "standard", 0)))
    values = _values(overrides)
    assert CPU_MODULE not in values["+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES"]
    assert values["actor_rollout_ref.rollout.name"] == "vllm"
    assert not any("VERL_PLATFORM" in item for item in overrides)


def test_driver_takes_the_runtime_env_of_the_override_list() -> None:
    cell = VerlCell(
        resolve_cell("tiny-arith", "grpo-n4", "standard", 0, engine="verl"),
        model_path="/m",
        overrides={"+ray_kwargs.ray_init.runtime_env.env_vars.X": 1},
    )
    env = runtime_env_vars(build_overrides(cell))
    assert env["VERL_PLATFORM"] == "cpu"
    assert env["VERL_USE_EXTERNAL_MODULES"] == f"{PLUGIN_MODULE},{CPU_MODULE}"
    assert env["X"] == "1"  # Ray takes strings only


def test_cpu_resources_cover_the_gpu_resource_keys() -> None:
    resources, overrides = catalog.cpu_resources("tiny-arith")
    assert set(resources) == set(catalog.gpu_resources("qwen2.5-math-7b"))
    assert all(setting.source for setting in [*resources.values(), *overrides.values()])
    with pytest.raises(Exception, match="CPU backbone"):
        catalog.cpu_resources("qwen2.5-math-7b")


def test_a_sweep_file_chooses_the_verl_engine_for_cpu_cells(tmp_path, monkeypatch) -> None:
    from pathlib import Path

    from repro.cell_plan import plan_cell
    from repro.errors import ReproError
    from repro.launch.plan import CpuOptions
    from repro.sweep import load_sweep

    monkeypatch.setenv("REPRO_HOME", str(tmp_path / "home"))
    sweep = load_sweep(Path(__file__).parent.parent / "sweeps" / "tiny-verl.yaml")
    assert sweep.engine == "verl" and len(sweep.cells()) == 9  # every method of the catalog
    for cell in sweep.cells():
        plan = plan_cell(cell, sweep, tmp_path / "runs", CpuOptions(steps=3, batch=8))
        assert plan.argv[plan.argv.index("--engine") + 1] == "verl"
        values = _values(plan.config["overrides"])  # the verl config the job's `repro run` records
        assert values["trainer.total_training_steps"] == "3" and values["data.train_batch_size"] == "8"
        assert values["actor_rollout_ref.rollout.name"] == "vllm_cpu"
    local = load_sweep(Path(__file__).parent.parent / "sweeps" / "tiny.yaml")
    plan = plan_cell(local.cells()[0], local, tmp_path / "runs")
    assert "--engine" not in plan.argv and "train" in plan.config  # the CPU trainer's own config
    bad = tmp_path / "bad.yaml"
    bad.write_text("backbones: [tiny-arith]\nmethods: [grpo-n4]\nprompt_sets: [standard]\nengine: vllm\n")
    with pytest.raises(ReproError, match="engine must be one of local, verl"):
        load_sweep(bad)


@pytest.mark.parametrize("gpu_backbone", ["qwen2.5-math-7b", "qwen2.5-math-1.5b"])
def test_a_gpu_cell_and_its_cpu_rehearsal_resolve_the_same_fsdp_strategy(gpu_backbone) -> None:
    """The rehearsal covers the GPU cells' engine and checkpoint path only if both run the same FSDP: verl's
    default `fsdp` is FSDP1 (workers/engine/fsdp/transformer_impl.py), the CPU engine FSDP2."""
    gpu = compose_and_validate(
        build_overrides(
            VerlCell(
                resolve_cell(gpu_backbone, "seq-balance", "standard", 0),
                train_file="t.parquet",
                val_file="v.parquet",
            )
        )
    )
    cpu = compose_and_validate(
        build_overrides(
            VerlCell(
                resolve_cell("tiny-arith", "seq-balance", "standard", 0, engine="verl"),
                train_file="t.parquet",
                val_file="v.parquet",
            )
        )
    )
    for cfg in (gpu, cpu):
        assert cfg.actor_rollout_ref.actor.strategy == "fsdp2"
        assert cfg.actor_rollout_ref.ref.strategy == "fsdp2"
    assert catalog.hyperparameters()["fsdp_strategy"].value == "fsdp2"
