"""The real stack's admission rules (vLLM's max_model_len, verl's server) on CPU: the rules themselves, every
GPU cell of the grid through them, the CPU rollout server refusing what vLLM refuses, and a --set typo."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from vllm_rule_cases import LENGTH_CASES, SERVER_CASES, VERL_REQUEST_CASES, VLLM_REQUEST_CASES, LengthCase, RequestCase

from repro.cell import resolve_cell
from repro.cli import main
from repro.sweep import load_sweep
from repro.verl_plugin.admission import admit
from repro.verl_plugin.config_builder import VerlCell, build_overrides, compose, rollout_seed
from repro.verl_plugin.preflight import admission
from repro.vllm_rules import (
    RESTATED,
    VLLMRefusal,
    check_max_model_len,
    derived_max_model_len,
    verify_max_model_len,
    verify_request,
    verify_vllm_request,
    verl_server_max_model_len,
)

ROOT = Path(__file__).resolve().parents[1]
QWEN_MATH = {"model_type": "qwen2", "max_position_embeddings": 4096}  # Qwen2.5-Math-1.5B/7B config.json


# ------------------------------------------------------------------------------------ vLLM's own rule


def test_derived_length_follows_vllms_keys_rope_and_tokenizer() -> None:
    assert derived_max_model_len(QWEN_MATH) == (4096, "max_position_embeddings")
    assert derived_max_model_len({"n_positions": 1024, "max_position_embeddings": 2048}) == (1024, "n_positions")
    assert derived_max_model_len({}) == (2048, "default")  # vLLM's assumption with no key
    # yarn: original positions x factor; llama3 rope is not multiplied (its positions already include it)
    yarn = {"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 32768}}  # fmt: skip
    assert derived_max_model_len(yarn)[0] == 131072
    llama = {"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 32.0}}
    assert derived_max_model_len(llama)[0] == 131072
    # vLLM reads the tokenizer's model_max_length only for pooling models (real vLLM: tests/test_vllm_rules_real.py)
    assert derived_max_model_len(QWEN_MATH, {"model_max_length": 2048})[0] == 4096
    assert derived_max_model_len({"text_config": {"max_position_embeddings": 8192}})[0] == 8192


def test_a_longer_max_model_len_is_refused_with_vllms_words_unless_allowed() -> None:
    with pytest.raises(VLLMRefusal) as refused:
        verify_max_model_len(32768, QWEN_MATH, env={})
    assert str(refused.value).startswith(
        "User-specified max_model_len (32768) is greater than the derived max_model_len "
        "(max_position_embeddings=4096.0 or model_max_length=None in model's config.json)."
    )  # a float, as vLLM prints it
    assert str(refused.value).endswith("will cause a CUDA array out-of-bounds error.")  # vLLM's whole tail
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in str(refused.value)
    assert verify_max_model_len(32768, QWEN_MATH, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}) == 32768
    assert verify_max_model_len(3072, QWEN_MATH, env={}) == 3072
    assert verify_max_model_len(None, QWEN_MATH, env={}) == 4096
    # hf_overrides (not verl's override_config) raise vLLM's own view of the positions
    assert verify_max_model_len(8192, {**QWEN_MATH, "max_position_embeddings": 8192}, env={}) == 8192


@pytest.mark.parametrize("case", LENGTH_CASES, ids=lambda c: c.name)
def test_the_restated_length_rule_gives_vllms_answer_on_every_case(case: LengthCase) -> None:
    """The table real vLLM answers in tests/test_vllm_rules_real.py: same length, or the same whole refusal."""
    env = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"} if case.allow_long else {}
    config = {**case.config, **case.hf_overrides}
    if isinstance(case.expected, int):
        assert verify_max_model_len(case.max_model_len, config, case.tokenizer_config, env) == case.expected
    else:
        with pytest.raises(VLLMRefusal) as refused:
            verify_max_model_len(case.max_model_len, config, case.tokenizer_config, env)
        assert str(refused.value) == case.expected
    if case.key is not None:
        assert derived_max_model_len(config)[1] == case.key


@pytest.mark.parametrize("case", SERVER_CASES, ids=lambda c: c.name)
def test_the_restated_server_rule_gives_verls_answer(case) -> None:
    if isinstance(case.expected, int):
        assert verl_server_max_model_len(case.max_model_len, case.positions) == case.expected
    else:
        with pytest.raises(VLLMRefusal) as refused:
            verl_server_max_model_len(case.max_model_len, case.positions)
        assert str(refused.value) == case.expected


@pytest.mark.parametrize(
    ("rule", "case"),
    [(verify_request, c) for c in VERL_REQUEST_CASES] + [(verify_vllm_request, c) for c in VLLM_REQUEST_CASES],
    ids=lambda x: getattr(x, "name", getattr(x, "__name__", "")),
)
def test_the_restated_request_rules_give_the_real_answers(rule, case: RequestCase) -> None:
    if isinstance(case.expected, int):
        assert rule(case.prompt_len, case.max_tokens, case.max_model_len) == case.expected
    else:
        with pytest.raises(VLLMRefusal) as refused:
            rule(case.prompt_len, case.max_tokens, case.max_model_len)
        assert str(refused.value) == case.expected


def test_the_restatement_decides_where_vllm_cannot_be_asked(tmp_path, monkeypatch) -> None:
    """A Hub id (no local config.json) never reaches vLLM, which would ask the Hub; without vLLM the restatement
    decides and says so (real vLLM's own verdicts: tests/test_vllm_rules_real.py)."""
    hub_id = tmp_path / "Qwen" / "Qwen2.5-Math-7B"  # no such folder: what a Hub id looks like here
    assert check_max_model_len(3072, QWEN_MATH, env={}, folder=hub_id) == (3072, RESTATED)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN_MATH))
    monkeypatch.setitem(sys.modules, "vllm.engine.arg_utils", None)  # vLLM absent
    assert check_max_model_len(3072, QWEN_MATH, env={}, folder=folder) == (3072, RESTATED)
    with pytest.raises(VLLMRefusal, match=r"User-specified max_model_len \(32768\)") as refused:
        check_max_model_len(32768, QWEN_MATH, env={}, folder=folder)
    assert refused.value.judge == RESTATED


def test_requests_need_headroom_and_are_capped() -> None:
    assert verify_request(1000, 4096, 3072) == 2072
    assert verify_request(10, None, 64) == 54
    with pytest.raises(VLLMRefusal, match="leaves no room"):
        verify_request(3072, 16, 3072)
    with pytest.raises(VLLMRefusal, match="max_tokens must be at least 1"):
        verify_request(10, 0, 64)


def test_admission_in_verls_order_for_the_released_override() -> None:
    override = {"max_position_embeddings": 32768}  # the released script's +model.override_config
    # the old override list: max_model_len null -> verl takes 32768 -> vLLM refuses the 4096-position checkpoint
    with pytest.raises(VLLMRefusal, match=r"User-specified max_model_len \(32768\)"):
        admit(None, 1024, 2048, QWEN_MATH, override, env={})
    assert admit(3072, 1024, 2048, QWEN_MATH, override, env={}).max_model_len == 3072
    # without the override, verl's own check refuses first, with verl's message
    with pytest.raises(VLLMRefusal, match=r"should be less than or equal to max_position_embeddings \(4096\)"):
        admit(8192, 1024, 2048, QWEN_MATH, {}, env={})
    with pytest.raises(VLLMRefusal, match="cut responses"):
        admit(2048, 1024, 2048, QWEN_MATH, {}, env={})
    assert admit(2048, 1024, 2048, QWEN_MATH, {}, env={}, whole_responses=False).max_model_len == 2048


# ------------------------------------------------------------------------------ every GPU cell of the grid


def _cell(c, preset: str, **overrides) -> VerlCell:
    resolved = resolve_cell(c.backbone.key, c.method.key, c.prompt_set.key, c.seed, preset=preset)
    return VerlCell(resolved, train_file="/t.parquet", val_file="/v.parquet",
                    run_dir=Path("/runs") / c.backbone.key, overrides=overrides)  # fmt: skip


@pytest.mark.parametrize("preset", ["paper", "released"])
def test_the_old_override_list_is_refused_where_the_released_override_reaches_verl(preset: str) -> None:
    """Before this fix max_model_len was null: Qwen2.5-Math refused wherever the 32768-position override is
    passed (every paper cell, the released Seq/Est script), fine where it is not (the released GRPO script on
    its own 1.5B backbone). Every grid cell as built now passes: tests/test_verl_config.py, all 56 cells."""
    for c in load_sweep(ROOT / "sweeps" / "paper.yaml").cells():
        if not c.backbone.key.startswith("qwen2.5-math") or c.method.key not in ("grpo-n4", "seq-balance", "est"):
            continue
        new = compose(build_overrides(_cell(c, preset)))
        assert admission(new, c.backbone)[0].max_model_len == 3072
        old = compose(build_overrides(_cell(c, preset, **{"actor_rollout_ref.rollout.max_model_len": None})))
        if preset == "released" and c.method.key == "grpo-n4" and c.backbone.key == "qwen2.5-math-1.5b":
            assert admission(old, c.backbone)[0].max_model_len == 4096  # run_grpo.sh: the model's own context
        else:
            with pytest.raises(VLLMRefusal, match=r"User-specified max_model_len \(32768\) is greater"):
                admission(old, c.backbone)


def test_rollout_seeds_differ_across_cell_seeds_and_replicas() -> None:
    seeds = {rollout_seed(s) + replica for s in range(3) for replica in range(8)}  # verl: seed + replica_rank
    assert len(seeds) == 24 and rollout_seed(0) == 42


def test_dry_run_refuses_a_context_vllm_refuses(capsys) -> None:
    code = main(["run", "--model", "qwen2.5-math-1.5b", "--method", "seq-balance", "--dry-run",
                 "--set", "actor_rollout_ref.rollout.max_model_len=null"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and len(err.strip().splitlines()) == 1
    assert "User-specified max_model_len (32768) is greater than the derived max_model_len" in err


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        ("actor_rollout_ref.rollout.n=abc", "actor_rollout_ref.rollout.n: Value 'abc' of type 'str' could not be"),
        ("actor_rollout_ref.actor.optim.lr=fast", "actor_rollout_ref.actor.optim.lr: Value 'fast'"),
        ("+actor_rollout_ref.rollout.no_such_knob=1", "actor_rollout_ref.rollout.no_such_knob is not a key of"),
        ("trainer.save_freq=often", "trainer.save_freq: 'often' is not an integer"),
        ("+algorithm.reinforce_ada.max_rounds=many", "algorithm.reinforce_ada.max_rounds: 'many' is not an integer"),
        ("+algorithm.reinforce_ada.rounds=4", "algorithm.reinforce_ada.rounds is not a field of SamplerSpec"),
    ],
)
def test_a_set_typo_fails_in_the_dry_run_with_one_line(setting: str, fragment: str, capsys) -> None:
    code = main(["run", "--model", "qwen2.5-math-7b", "--method", "seq-balance", "--set", setting, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert fragment in err


def test_a_valid_set_still_passes(capsys) -> None:
    sets = ["--set", "actor_rollout_ref.rollout.n=8", "--set", "+algorithm.reinforce_ada.max_rounds=6"]
    code = main(["run", "--model", "qwen2.5-math-7b", "--method", "seq-balance", "--dry-run", *sets])
    out = capsys.readouterr().out
    assert code == 0 and "max_rounds: 6" in out


# ------------------------------------------------------------------------- the CPU rollout server


def _server(model: Path, max_model_len: int | None, override: dict):
    from verl.workers.config import HFModelConfig

    from repro.verl_plugin.cpu_rollout import CpuRolloutServer

    config = OmegaConf.create({"_target_": "verl.workers.config.RolloutConfig", "name": "cpu",
                               "prompt_length": 48, "response_length": 16, "max_model_len": max_model_len})  # fmt: skip
    return CpuRolloutServer(config, HFModelConfig(path=str(model), override_config=override))


def test_cpu_rollout_server_refuses_what_vllm_refuses(tiny_home, monkeypatch) -> None:
    model = next((tiny_home / "models").iterdir())
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    assert _server(model, None, {}).max_model_len == 64  # verl: null -> the model's positions
    assert _server(model, 64, {}).max_model_len == 64
    with pytest.raises(VLLMRefusal, match=r"should be less than or equal to max_position_embeddings \(64\)"):
        _server(model, 128, {})  # verl's server
    with pytest.raises(VLLMRefusal, match=r"User-specified max_model_len \(128\) is greater"):
        _server(model, 128, {"max_position_embeddings": 128})  # the Qwen2.5-Math case, in miniature
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert _server(model, 128, {"max_position_embeddings": 128}).max_model_len == 128


def test_a_sweep_overrides_typo_is_one_line_naming_the_cell_before_anything_is_written(tmp_path, capsys) -> None:
    sweep = tmp_path / "typo.yaml"
    sweep.write_text(
        "name: typo\nbackbones: [qwen2.5-math-7b]\nmethods: [grpo-n4]\nprompt_sets: [standard]\nseeds: [0]\n"
        "overrides:\n  actor_rollout_ref.rollout.n: abc\n"
    )
    code = main(["sweep", "run", str(sweep), "--launcher", "slurm", "--dry-run", "--runs-root", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: qwen2.5-math-7b__grpo-n4__standard__s0: verl's typed config refuses")
    assert "actor_rollout_ref.rollout.n: Value 'abc'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r" / ".launch" / "dry-run").exists()
