"""`--preset released` against the released scripts, value by value.

The tables below were written by reading RLHFlow/Reinforce-Ada `scripts/run_reinforce_ada.sh` and
`scripts/run_grpo.sh` (the WeiXiongUST/Reinforce-Ada copies set the same values), not by running this
project's code: each row is (verl 0.9.1 key, the value the script gives verl, a fragment of the script
line or the reason it sets that value). A row fails if the override list, verl's composed config, the
catalog's recorded source or the dry run's printout disagrees with it.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from repro import catalog
from repro.catalog import CatalogError
from repro.catalog.run_readers import _parse_released_scripts
from repro.cell import resolve_cell
from repro.cli import main
from repro.verl_plugin.config_builder import (
    VerlCell,
    _fmt,
    build_overrides,
    compose_and_validate,
    released_report,
)

SEQ_SCRIPT = "scripts/run_reinforce_ada.sh"
GRPO_SCRIPT = "scripts/run_grpo.sh"

# scripts/run_reinforce_ada.sh, for Reinforce-Ada (seq and est) cells on its own model, Qwen2.5-Math-1.5B
SEQ_ROWS: list[tuple[str, Any, str]] = [
    ("actor_rollout_ref.actor.clip_ratio_c", 10.0, "actor_rollout_ref.actor.clip_ratio_c=10.0"),
    ("data.truncation", "left", "data.truncation='left'"),
    ("trainer.total_epochs", 1000, "trainer.total_epochs=1000"),
    ("trainer.total_training_steps", 400, "trainer.total_training_steps=400"),
    ("trainer.save_freq", 50, "trainer.save_freq=50"),
    ("trainer.resume_mode", "auto", 'trainer.resume_mode="auto"'),
    ("data.prompt_key", "prompt", "data.prompt_key=prompt"),
    ("data.max_prompt_length", 1024, "max_prompt_length=$((1024 * 1))"),
    ("data.max_response_length", 2048, "max_response_length=$((2048))"),
    ("data.train_batch_size", 512, "train_prompt_bsz=512"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", 128, "train_prompt_mini_bsz=128"),
    ("actor_rollout_ref.actor.optim.lr", 1e-6, "actor_rollout_ref.actor.optim.lr=1e-6"),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps", 10, "lr_warmup_steps=10"),
    ("actor_rollout_ref.actor.optim.weight_decay", 0.0, "weight_decay=0."),
    ("actor_rollout_ref.actor.optim.clip_grad", 1.0, "actor_rollout_ref.actor.grad_clip=1.0"),
    ("actor_rollout_ref.actor.entropy_coeff", 0, "actor_rollout_ref.actor.entropy_coeff=0"),
    ("actor_rollout_ref.actor.clip_ratio_low", 0.2, "clip_ratio_low=0.2"),
    ("actor_rollout_ref.actor.clip_ratio_high", 0.28, "clip_ratio_high=0.28"),
    ("actor_rollout_ref.actor.loss_agg_mode", "token-mean", 'loss_agg_mode="token-mean"'),
    ("actor_rollout_ref.actor.use_kl_loss", False, "use_kl_loss=False"),
    ("actor_rollout_ref.actor.kl_loss_coef", 0.0, "kl_loss_coef=0.0"),
    ("algorithm.use_kl_in_reward", False, "use_kl_in_reward=False"),
    ("algorithm.kl_ctrl.kl_coef", 0.0, "kl_coef=0.0"),
    ("actor_rollout_ref.actor.use_dynamic_bsz", True, "use_dynamic_bsz=True"),
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 16, "ppo_micro_batch_size_per_gpu=16"),
    ("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", True, "ref.log_prob_use_dynamic_bsz=${use_dynamic_bsz}"),
    ("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", True, "rollout.log_prob_use_dynamic_bsz"),
    ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", 6144, "(max_prompt_length + max_response_length) * 2"),
    ("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", 9216, "(max_prompt_length + max_response_length) * 3"),
    ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", 9216, "${infer_ppo_max_token_len}"),
    ("actor_rollout_ref.model.use_remove_padding", True, "use_remove_padding=True"),
    ("actor_rollout_ref.model.enable_gradient_checkpointing", True, "enable_gradient_checkpointing=True"),
    ("actor_rollout_ref.actor.use_torch_compile", False, "use_torch_compile=False"),
    ("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size", 1, "sp_size=1"),
    ("actor_rollout_ref.ref.ulysses_sequence_parallel_size", 1, "ref.ulysses_sequence_parallel_size=${sp_size}"),
    ("actor_rollout_ref.rollout.name", "vllm", "actor_rollout_ref.rollout.name=vllm"),
    ("actor_rollout_ref.rollout.temperature", 1.0, "temperature=1.0"),
    ("actor_rollout_ref.rollout.top_p", 1.0, "top_p=1.0"),
    ("actor_rollout_ref.rollout.top_k", -1, "top_k=-1"),
    ("actor_rollout_ref.rollout.enable_chunked_prefill", True, "enable_chunked_prefill=True"),
    ("actor_rollout_ref.rollout.max_num_batched_tokens", 3072, "$((max_prompt_length + max_response_length))"),
    ("actor_rollout_ref.rollout.val_kwargs.temperature", 0.0, "val_temperature=0.0"),
    ("actor_rollout_ref.rollout.val_kwargs.top_p", 1.0, "val_top_p=1.0"),
    ("actor_rollout_ref.rollout.val_kwargs.top_k", -1, "val_kwargs.top_k=${top_k}"),
    ("actor_rollout_ref.rollout.val_kwargs.do_sample", False, "val_kwargs.do_sample=False"),
    ("actor_rollout_ref.rollout.val_kwargs.n", 1, "val_kwargs.n=1"),
    ("actor_rollout_ref.ref.fsdp_config.param_offload", True, "ref.fsdp_config.param_offload=TRUE"),
    ("reward.reward_manager.name", "naive", "reward_model.reward_manager=naive"),
    # sized for the script's 8-GPU node and model
    ("trainer.nnodes", 1, "trainer.nnodes=1"),
    ("trainer.n_gpus_per_node", 8, "NGPUS=8"),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size", 1, "tp_size=1"),
    ("actor_rollout_ref.rollout.gpu_memory_utilization", 0.8, "gpu_memory_utilization=0.8"),
    ("actor_rollout_ref.actor.fsdp_config.param_offload", False, "offload=False"),
    ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", False, "offload=False"),
    ("actor_rollout_ref.actor.fsdp_config.fsdp_size", 8, "fsdp_size=${NGPUS}"),
    ("+actor_rollout_ref.model.override_config.max_position_embeddings", 32768, "max_position_embeddings=32768"),
]

# scripts/run_grpo.sh, for uniform (GRPO) cells; "leaves it unset" rows are verl's defaults the script relies on
GRPO_ROWS: list[tuple[str, Any, str]] = [
    ("algorithm.adv_estimator", "grpo", "algorithm=grpo"),
    ("algorithm.norm_adv_by_std_in_grpo", True, "leaves it unset"),
    ("actor_rollout_ref.actor.optim.weight_decay", 0.01, "leaves it unset"),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps", 0, "no warm-up"),
    ("actor_rollout_ref.actor.clip_ratio_c", 3.0, "leaves it unset"),
    ("actor_rollout_ref.actor.use_dynamic_bsz", False, "leaves it unset"),
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 16, "ppo_micro_batch_size_per_gpu=16"),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 32, "rollout.log_prob_micro_batch_size_per_gpu=32"),
    ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", 32, "ref.log_prob_micro_batch_size_per_gpu=32"),
    ("actor_rollout_ref.actor.entropy_coeff", 0, "leaves it unset"),
    ("actor_rollout_ref.actor.loss_agg_mode", "token-mean", "leaves it unset"),
    ("actor_rollout_ref.actor.optim.clip_grad", 1.0, "leaves it unset"),
    ("actor_rollout_ref.actor.optim.lr", 1e-6, "actor_rollout_ref.actor.optim.lr=1e-6"),
    ("actor_rollout_ref.actor.clip_ratio_low", 0.2, "clip_ratio_low=0.2"),
    ("actor_rollout_ref.actor.clip_ratio_high", 0.28, "clip_ratio_high=0.28"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", 128, "train_prompt_mini_bsz=128"),
    ("actor_rollout_ref.actor.use_kl_loss", True, "actor_rollout_ref.actor.use_kl_loss=True"),
    ("actor_rollout_ref.actor.kl_loss_coef", 0.0, "actor_rollout_ref.actor.kl_loss_coef=0.0"),
    ("actor_rollout_ref.actor.kl_loss_type", "low_var_kl", "kl_loss_type=low_var_kl"),
    ("algorithm.use_kl_in_reward", False, "use_kl_in_reward=False"),
    ("algorithm.kl_ctrl.kl_coef", 0.001, "algorithm.kl_ctrl.kl_coef=0.001"),
    ("data.train_batch_size", 512, "train_prompt_bsz=512"),
    ("data.max_prompt_length", 1024, "data.max_prompt_length=1024"),
    ("data.max_response_length", 2048, "data.max_response_length=2048"),
    ("data.filter_overlong_prompts", True, "data.filter_overlong_prompts=True"),
    ("data.truncation", "error", "data.truncation='error'"),
    ("actor_rollout_ref.model.use_remove_padding", True, "use_remove_padding=True"),
    ("actor_rollout_ref.model.enable_gradient_checkpointing", True, "enable_gradient_checkpointing=True"),
    ("actor_rollout_ref.ref.fsdp_config.param_offload", True, "ref.fsdp_config.param_offload=True"),
    ("actor_rollout_ref.rollout.name", "vllm", "actor_rollout_ref.rollout.name=vllm"),
    ("actor_rollout_ref.rollout.temperature", 1.0, "leaves it unset"),
    ("actor_rollout_ref.rollout.top_p", 1.0, "leaves it unset"),
    ("trainer.critic_warmup", 0, "trainer.critic_warmup=0"),
    ("trainer.save_freq", 50, "trainer.save_freq=50"),
    ("trainer.total_training_steps", 400, "trainer.total_training_steps=400"),
    ("trainer.total_epochs", 1000, "trainer.total_epochs=1000"),
    # sized for the script's 8-GPU node and model
    ("trainer.nnodes", 1, "trainer.nnodes=1"),
    ("trainer.n_gpus_per_node", 8, "NGPUS=8"),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size", 1, "tensor_model_parallel_size=1"),
    ("actor_rollout_ref.rollout.gpu_memory_utilization", 0.8, "gpu_memory_utilization=0.8"),
    ("actor_rollout_ref.actor.fsdp_config.param_offload", False, "actor.fsdp_config.param_offload=False"),
    ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", False, "optimizer_offload=False"),
]


def _cell(method: str, backbone: str = "qwen2.5-math-1.5b", preset: str = "released", **kw) -> VerlCell:
    return VerlCell(
        resolve_cell(backbone, method, "standard", 0, preset=preset, engine="verl"),
        train_file="/d/t.parquet",
        val_file="/d/v.parquet",
        run_dir=Path("/runs/x"),
        **kw,
    )


def _dry_run(method: str, tmp: Path, *extra: str) -> str:
    out = io.StringIO()
    argv = ["run", "--model", "qwen2.5-math-1.5b", "--method", method, "--preset", "released", "--dry-run"]
    argv += ["--train-file", "/d/t.parquet", "--val-file", "/d/v.parquet", "--runs-root", str(tmp), *extra]
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def seq_run(tmp_path_factory) -> tuple[list[str], Any, str]:
    overrides = build_overrides(_cell("seq-balance"))
    return overrides, compose_and_validate(overrides), _dry_run("seq-balance", tmp_path_factory.mktemp("seq"))


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory) -> tuple[list[str], Any, str]:
    overrides = build_overrides(_cell("grpo-n4"))
    return overrides, compose_and_validate(overrides), _dry_run("grpo-n4", tmp_path_factory.mktemp("grpo"))


def _check_row(run: tuple[list[str], Any, str], kind: str, script: str, key: str, value: Any, fragment: str) -> None:
    overrides, cfg, dry = run
    line = f"{key}={_fmt(value)}"
    assert line in overrides, f"{line} missing from the override list"
    got = OmegaConf.select(cfg, key.lstrip("+"))
    assert got == value and type(got) is type(value), f"verl composed {key}={got!r}, the script sets {value!r}"
    source = catalog.released_script(kind).applied(catalog.get_backbone("qwen2.5-math-1.5b"))[key].source
    assert source.startswith(script) and fragment in source, f"{key}: catalog source {source!r}"
    assert f"#   {line}  <- {source}" in dry.splitlines(), f"the dry run does not show {line} with its source"


@pytest.mark.parametrize(("key", "value", "fragment"), SEQ_ROWS, ids=[r[0] for r in SEQ_ROWS])
def test_seq_cell_takes_run_reinforce_ada_sh(seq_run, key: str, value: Any, fragment: str) -> None:
    _check_row(seq_run, "seq", SEQ_SCRIPT, key, value, fragment)


@pytest.mark.parametrize(("key", "value", "fragment"), GRPO_ROWS, ids=[r[0] for r in GRPO_ROWS])
def test_grpo_cell_takes_run_grpo_sh(grpo_run, key: str, value: Any, fragment: str) -> None:
    _check_row(grpo_run, "uniform", GRPO_SCRIPT, key, value, fragment)


def test_tables_cover_every_released_override() -> None:
    """No released value reaches verl without a row above (a new catalog value needs a hand-checked row)."""
    assert {r[0] for r in SEQ_ROWS} == set(
        resolve_cell("qwen2.5-math-1.5b", "seq-balance", preset="released").released_settings()
    )
    grpo = resolve_cell("qwen2.5-math-1.5b", "grpo-n4", preset="released").released_settings()
    assert {r[0] for r in GRPO_ROWS} == set(grpo) - {"+actor_rollout_ref.model.override_config.max_position_embeddings"}


def test_grpo_on_its_model_drops_the_context_override_the_script_never_set(grpo_run) -> None:
    overrides, cfg, dry = grpo_run
    assert not any("max_position_embeddings" in o for o in overrides)
    assert "max_position_embeddings" not in cfg.actor_rollout_ref.model.get("override_config", {})
    assert "+actor_rollout_ref.model.override_config.max_position_embeddings removed  <- scripts/run_grpo.sh" in dry
    # rollout.n is the method's group size, which for grpo-n4 is the script's n=4
    assert cfg.actor_rollout_ref.rollout.n == 4 and "actor_rollout_ref.rollout.n=4: the method's n" in dry


def test_dry_run_lists_what_verl_does_not_get_and_keeps_its_contract(seq_run) -> None:
    _, _, dry = seq_run
    assert "# released preset: scripts/run_reinforce_ada.sh of RLHFlow/Reinforce-Ada" in dry
    assert "# released values verl 0.9.1 does not get (scripts/run_reinforce_ada.sh):" in dry
    assert "#   VLLM_ATTENTION_BACKEND=XFORMERS: " in dry
    assert "#   trainer.val_before_train=true: in-training validation stays off" in dry
    command = next(line for line in dry.splitlines() if line.startswith("python -m repro.verl_plugin.entry"))
    assert "actor_rollout_ref.actor.clip_ratio_c=10.0" in command and "trainer.total_epochs=1000" in command
    resolved = OmegaConf.create(dry.split("validate_config passed):\n", 1)[1])
    assert resolved.actor_rollout_ref.actor.clip_ratio_c == 10.0 and resolved.data.truncation == "left"


def test_a_set_override_wins_and_the_dry_run_says_so(tmp_path) -> None:
    dry = _dry_run("seq-balance", tmp_path, "--set", "actor_rollout_ref.actor.clip_ratio_c=5.0")
    assert "actor_rollout_ref.actor.clip_ratio_c=5.0" in dry
    line = next(ln for ln in dry.splitlines() if ln.startswith("#   actor_rollout_ref.actor.clip_ratio_c=10.0"))
    assert line.endswith("[replaced by --set]")


def test_est_takes_the_same_script_and_the_released_sampler() -> None:
    overrides = build_overrides(_cell("est"))
    cfg = compose_and_validate(overrides)
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_c, cfg.data.truncation, cfg.trainer.total_epochs) == (10.0, "left", 1000)
    assert cfg.actor_rollout_ref.rollout.n == 8  # est-released's n_avg, not the script's n=4
    ada = cfg.algorithm.reinforce_ada  # what the plugin's manager builds its sampler from
    assert (ada.allocation, ada.prior, ada.prior_alpha, ada.prior_beta) == ("inverse", "fixed", 1.0, 16.0)
    assert (ada.est_advantage, ada.decay, ada.p_min, ada.n_avg) == ("released", 0.9, 1e-6, 8)
    paper = compose_and_validate(build_overrides(_cell("est", preset="paper"))).algorithm.reinforce_ada
    # the paper-preset Est uses none of the released knobs, so its override list reads as before they existed
    assert not {"allocation", "prior", "prior_alpha", "prior_beta", "est_advantage"} & set(paper)
    est = catalog.released_script("est")
    assert est.script == SEQ_SCRIPT and "ray_trainer_ema.py" in est.trainer
    notes = {k: s.note for k, s in est.not_passed.items()}
    assert "inverse_allocation" in notes["ray_trainer_ema.allocation"]
    assert "prior: fixed" in notes["ray_trainer_ema.prior"]
    assert "20fc09b" in est.not_passed["ray_trainer_ema.budget"].source


def test_other_backbones_keep_their_resources_but_take_the_script_values() -> None:
    cfg = compose_and_validate(build_overrides(_cell("seq-balance", backbone="qwen2.5-math-7b")))
    rollout, actor = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor
    assert (rollout.tensor_model_parallel_size, rollout.gpu_memory_utilization) == (2, 0.55)
    assert actor.fsdp_config.optimizer_offload is True and actor.fsdp_config.fsdp_size == -1
    assert (actor.clip_ratio_c, actor.ppo_max_token_len_per_gpu, cfg.trainer.total_epochs) == (10.0, 6144, 1000)
    grpo = compose_and_validate(build_overrides(_cell("grpo-n16", backbone="qwen2.5-math-7b")))
    assert grpo.actor_rollout_ref.model.override_config.max_position_embeddings == 32768  # 7B keeps its own
    assert grpo.actor_rollout_ref.actor.optim.weight_decay == 0.01 and grpo.actor_rollout_ref.rollout.n == 16


def test_paper_preset_is_unchanged_by_the_released_values() -> None:
    for method in ("seq-balance", "grpo-n4", "est"):
        overrides = build_overrides(_cell(method, preset="paper"))
        cfg = compose_and_validate(overrides)
        actor = cfg.actor_rollout_ref.actor
        assert not any(o.startswith(("actor_rollout_ref.actor.clip_ratio_c=", "data.truncation=")) for o in overrides)
        assert (actor.clip_ratio_c, cfg.data.truncation) == (3.0, "error")  # verl's defaults, untouched
        assert (actor.optim.weight_decay, actor.optim.lr_warmup_steps, actor.use_dynamic_bsz) == (0.0, 10, True)
        assert (actor.entropy_coeff, cfg.trainer.total_training_steps) == (1e-4, 600)
        assert cfg.trainer.total_epochs == 600  # no training set yet: one step per epoch (generous_epochs)


def test_dapo_and_cpu_backbones_take_no_script_values() -> None:
    assert catalog.released_script("dapo") is None
    assert resolve_cell("qwen2.5-math-1.5b", "dapo", preset="released").released_settings() == {}
    dapo = compose_and_validate(build_overrides(_cell("dapo")))
    assert dapo.actor_rollout_ref.actor.clip_ratio_c == 3.0 and dapo.trainer.total_training_steps == 400
    dapo_cell = resolve_cell("qwen2.5-math-1.5b", "dapo", preset="released")
    assert "no released script trained dapo" in released_report(dapo_cell, [])[0]
    assert resolve_cell("tiny-arith", "seq-balance", preset="released", engine="verl").released_settings() == {}
    tiny = build_overrides(_cell("seq-balance", backbone="tiny-arith", model_path="/m"))
    assert not any(o.startswith("actor_rollout_ref.actor.clip_ratio_c=") for o in tiny)


def test_shared_released_hyperparameters_agree_with_both_scripts() -> None:
    h = catalog.hyperparameters()
    for kind in ("seq", "uniform"):
        applied = catalog.released_script(kind).applied(catalog.get_backbone("qwen2.5-math-1.5b"))
        assert applied["actor_rollout_ref.actor.entropy_coeff"].value == h["entropy_coeff"].released == 0
        assert applied["trainer.total_training_steps"].value == h["total_training_steps"].released == 400


def test_methods_page_lists_every_released_value_with_its_script(capsys, monkeypatch) -> None:
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "250")  # one table row per line, so every key is one substring
    assert main(["methods", "grpo-n4", "--preset", "released"]) == 0
    out = capsys.readouterr().out
    assert "Released preset: scripts/run_grpo.sh of RLHFlow/Reinforce-Ada" in out
    rows = [line.split("│") for line in out.splitlines() if line.count("│") == 4]  # | key | value | source |
    shown = {cells[1].strip(): cells[2].strip() for cells in rows if cells[1].strip()}
    for key, value, _ in GRPO_ROWS:
        assert shown.get(key) == _fmt(value), key
    assert "does not get, and why" in out and "VLLM_ATTENTION_BACKEND" in out
    assert main(["methods", "seq-balance"]) == 0
    assert "repro methods seq-balance --preset released" in capsys.readouterr().out
    assert main(["methods", "seq-balance", "--preset", "fast"]) == 2


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"kinds": ["seq", "ppo"]}, "kinds: must be a non-empty list"),
        ({"backbone": "gpt-5"}, "unknown backbone 'gpt-5'"),
        ({"not_passed": {"x": {"value": 1, "source": "s"}}}, r"not_passed\.x: needs a note"),
        ({"overrides": {"a.b": {"value": None, "source": "s"}}}, "null is only for resources"),
        ({"resources": {"+a.b": {"value": 1, "source": "s"}}}, r"\['a\.b'\] are in both"),
        ({"overrides": {"a.b": {"value": 1}}}, "missing source"),
    ],
)
def test_malformed_released_preset_is_one_clear_error(change: dict, fragment: str) -> None:
    entry = {
        "script": "s.sh",
        "repository": "r",
        "trainer": "t",
        "kinds": ["seq"],
        "backbone": "qwen2.5-math-1.5b",
        "overrides": {"a.b": {"value": 1, "source": "s.sh `a.b=1`"}},
        "resources": {"c.d": {"value": 2, "source": "s.sh"}},
        "not_passed": {"e": {"value": 3, "source": "s.sh", "note": "why"}},
    }
    assert _parse_released_scripts({"x": entry}, "released_preset.yaml", {"qwen2.5-math-1.5b"})["x"].kinds == ("seq",)
    with pytest.raises(CatalogError, match=fragment):
        _parse_released_scripts({"x": {**entry, **change}}, "released_preset.yaml", {"qwen2.5-math-1.5b"})
    with pytest.raises(CatalogError, match="seq is already taken by x"):
        _parse_released_scripts({"x": entry, "y": entry}, "released_preset.yaml", {"qwen2.5-math-1.5b"})
