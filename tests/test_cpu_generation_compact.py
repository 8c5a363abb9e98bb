"""Dropping finished rows from the running batch (compaction) in the CPU sampler and the CPU rollout server,
on the tiny model: the same tokens in both sampling paths of the trainer, log-probs that are the model's, caps and EOS
honoured, and a batch size from memory."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from repro.cpu_lm import generate
from repro.cpu_lm.model import TinyModelSpec, model_folder, prompt_ids
from repro.evaluation.transformers_generator import TransformersGenerator
from repro.verl_plugin import cpu_sampling
from repro.verl_plugin.cpu_sampling import SamplingKey, sample_batch

QUESTIONS = ["What is 7 plus 5?", "What is 12 times 3?", "What is 40 minus 17?", "What is 3 plus 4 plus 9?"]


@pytest.fixture(scope="module")
def tiny(tiny_home):
    folder = model_folder(TinyModelSpec(sft_steps=40, unboxed_share=0.0), tiny_home)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = [prompt_ids(tokenizer, q) for q in QUESTIONS for _ in range(6)]
    return model, tokenizer, prompts


@pytest.fixture
def compactions(monkeypatch) -> list[int]:
    """The number of rows kept at each compaction (both loops call generate.select_cache_rows)."""
    kept: list[int] = []
    select = generate.select_cache_rows

    def counting(cache, keep):
        kept.append(len(keep))
        return select(cache, keep)

    monkeypatch.setattr(generate, "select_cache_rows", counting, raising=True)
    monkeypatch.setattr(cpu_sampling, "select_cache_rows", counting, raising=True)
    return kept


def test_per_row_uniforms_give_the_same_tokens_with_and_without_compaction(tiny, compactions) -> None:
    model, tokenizer, prompts = tiny
    prompts = [*prompts, prompts[0][3:]]  # a shorter prompt: left padding differs between rows
    uniforms = torch.rand((len(prompts), 24), generator=torch.Generator().manual_seed(3))
    kwargs = dict(max_new_tokens=24, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, generator=None)
    for temperature in (1.0, 1.5):
        on = generate.sample(model, prompts, temperature=temperature, uniforms=uniforms, compact=True, **kwargs)
        off = generate.sample(model, prompts, temperature=temperature, uniforms=uniforms, compact=False, **kwargs)
        assert on == off
    assert compactions and min(compactions) >= 1  # rows were dropped, down to a few
    assert len({len(r) for r in on}) > 3  # rows finished at many different steps


def test_the_generator_path_gives_the_same_tokens_with_and_without_compaction(tiny, compactions) -> None:
    model, tokenizer, prompts = tiny
    kwargs = dict(max_new_tokens=16, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
    runs = [
        generate.sample(model, prompts, generator=torch.Generator().manual_seed(5), compact=compact, **kwargs)
        for compact in (True, False)
    ]
    assert compactions
    # every row reads the random numbers of its place in the full batch: runs made before compaction existed
    # (the committed results) are reproduced token for token
    assert runs[0] == runs[1]
    assert len({len(r) for r in runs[0]}) > 3  # rows finished at many different steps
    assert all(len(r) <= 16 and tokenizer.eos_token_id not in r[:-1] for r in runs[0])


def _model_logps(model, prompt: list[int], tokens: list[int], temperature: float) -> list[float]:
    """Log-probs of `tokens` after `prompt` under the temperature-scaled model, from one plain forward pass."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens).unsqueeze(1)).squeeze(1).tolist()


def test_rollout_sampler_compaction_keeps_caps_eos_and_logprobs(tiny, compactions) -> None:
    model, tokenizer, prompts = tiny
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    caps = [3, 20, 8, 20, 1, 14] * (len(prompts) // 6)
    key = SamplingKey(temperature=1.3, top_k=20, top_p=0.95)
    lengths = {}
    for compact in (True, False):
        out = sample_batch(model, prompts, caps, key, {eos}, pad, torch.Generator().manual_seed(7), compact=compact)
        for prompt, cap, (tokens, logps, stopped) in zip(prompts, caps, out, strict=True):
            assert 1 <= len(tokens) <= cap and len(logps) == len(tokens)
            assert stopped == (tokens[-1] == eos) and eos not in tokens[:-1]
            assert stopped or len(tokens) == cap  # a response ends at EOS or at its own cap
            assert logps == pytest.approx(_model_logps(model, prompt, tokens, key.temperature), abs=1e-4)
        lengths[compact] = torch.tensor([len(t) for t, _, _ in out], dtype=torch.float)
    assert compactions
    # different random numbers per row, the same distribution: mean lengths agree within a few tokens
    assert abs(float(lengths[True].mean() - lengths[False].mean())) < 3.0
    greedy = SamplingKey(temperature=0.0, top_k=-1, top_p=1.0)
    on, off = (
        sample_batch(model, prompts, caps, greedy, {eos}, pad, torch.Generator(), compact=compact)
        for compact in (True, False)
    )
    assert [t for t, _, _ in on] == [t for t, _, _ in off]
    assert [s for _, _, s in on] == [s for _, _, s in off]


def test_batch_rows_come_from_memory_and_never_exceed_1024(monkeypatch) -> None:
    smol = LlamaConfig(
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64, hidden_size=576,
        vocab_size=49152,
    )  # fmt: skip
    gen = TransformersGenerator.__new__(TransformersGenerator)
    gen.model, gen.max_new_tokens = SimpleNamespace(config=smol), 256
    per_row = 2 * 30 * 3 * 64 * 4 * (56 + 256) + 49152 * 4  # KV cache of 312 tokens and one step's logits
    assert gen.batch_rows(56) == 2 * 2**30 // per_row == 147
    monkeypatch.setenv(TransformersGenerator.MEMORY_ENV, "0.5")
    assert gen.batch_rows(56) == 36
    monkeypatch.setenv(TransformersGenerator.MEMORY_ENV, "1000")
    assert gen.batch_rows(56) == 1024  # never wider than the old fixed batch
    monkeypatch.setenv(TransformersGenerator.MEMORY_ENV, "0.0001")
    assert gen.batch_rows(56) == 1
