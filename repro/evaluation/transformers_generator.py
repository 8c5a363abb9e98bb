"""The CPU backend of evaluation: transformers' model under the project's own sampling loop (repro.cpu_lm), the
one that trains the tiny model, so a checkpoint is evaluated as it was sampled in training."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from repro import catalog
from repro.evaluation.generation import _regroup, _template, prompt_token_ids


class TransformersGenerator:
    """CPU sampling with the project's KV-cache loop (pure temperature sampling, no hidden top-k).

    `generate_seeded` gives every sample its own seed, as vLLM does: each row of one chunk-wide batch draws
    its tokens by inverse CDF from uniforms of its own torch.Generator (`repro.cpu_lm.generate.sample`), so
    a response does not depend on the chunk, shard or resume that draws it, and batching stays as wide as
    before. `generate(problems, n, seed)` keeps its one generator per call (the filter's pass counts, one seed a
    chunk); both prefill each distinct prompt once for its samples (`share_prompts`).

    Rows per batch (`batch_rows`) come from memory unless `batch_size` fixes them: a row holds its KV cache
    for the longest prompt plus `max_new_tokens` and one step's logits, and 1024 rows of SmolLM2-135M with
    56-token prompts and 256-token responses would hold 14 GB of cache (2 GiB holds 147 of them)."""

    MAX_ROWS = 1024  # the old fixed batch, kept as the ceiling
    MEMORY_ENV = "REPRO_CPU_GENERATION_GIB"  # the budget for the cache and logits of one batch, in GiB
    MEMORY_GIB = 2.0

    def __init__(
        self,
        model_path: Path,
        max_new_tokens: int,
        temperature: float = 1.0,
        batch_size: int | None = None,
        template: catalog.PromptTemplate | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from repro.cpu_lm.model import quiet_transformers

        quiet_transformers()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        # fp32, as training and the CPU rollout server run: verl's hf_model save writes fp32 tensors under a
        # config.json that says bfloat16, and loading by the config would evaluate every verl checkpoint in
        # bf16 (a mean log-prob shift of 0.011 on a tiny-arith checkpoint, and far slower matmuls on a CPU)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.model.eval()
        self.max_new_tokens, self.temperature, self.batch_size = max_new_tokens, temperature, batch_size
        self.template = _template(template)
        self._torch = torch

    def prompt_ids(self, problem: str) -> list[int]:
        return prompt_token_ids(self.tokenizer, problem, self.template)

    def batch_rows(self, longest_prompt: int) -> int:
        """The most rows whose fp32 KV cache (2 x layers x KV heads x head dim x 4 bytes a token, for the
        longest prompt plus `max_new_tokens`) and last-step logits (vocab x 4 bytes) fit the memory budget
        (`MEMORY_ENV`, GiB), between 1 and `MAX_ROWS`. The prefill keeps the logits of the last position only
        (`repro.cpu_lm.generate.last_logits_only`), so these two dominate what a batch holds. A stand-in model
        without a config (tests that fake the model) gets `MAX_ROWS`."""
        if getattr(self.model, "config", None) is None:
            return self.MAX_ROWS
        config = self.model.config.get_text_config()
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * 4
        per_row = per_token * (longest_prompt + self.max_new_tokens) + config.vocab_size * 4
        budget = float(os.environ.get(self.MEMORY_ENV, self.MEMORY_GIB)) * 2**30
        return max(1, min(self.MAX_ROWS, int(budget // per_row)))

    def _sample(self, flat: list[list[int]], gen, uniforms=None, share_prompts: bool = False) -> list[str]:
        from repro.cpu_lm.generate import sample

        texts: list[str] = []
        step = self.batch_size or self.batch_rows(max((len(p) for p in flat), default=1))
        for start in range(0, len(flat), step):
            out = sample(
                self.model,
                flat[start : start + step],
                max_new_tokens=self.max_new_tokens,
                eos_id=self.tokenizer.eos_token_id,
                pad_id=self.tokenizer.pad_token_id,
                generator=gen,
                temperature=self.temperature,
                uniforms=None if uniforms is None else uniforms[start : start + step],
                share_prompts=share_prompts,
            )
            texts += self.tokenizer.batch_decode(out, skip_special_tokens=True)
        return texts

    def generate(self, problems: Sequence[str], n: int, seed: int) -> list[list[str]]:
        gen = self._torch.Generator().manual_seed(seed)
        prompts = [self.prompt_ids(p) for p in problems]
        texts = self._sample([ids for ids in prompts for _ in range(n)], gen, share_prompts=True)
        return [texts[i * n : (i + 1) * n] for i in range(len(problems))]

    def generate_seeded(self, problems: Sequence[str], seeds: Sequence[Sequence[int]]) -> list[list[str]]:
        """Every sample from its own seed, all of them in one batch: each row draws its tokens from uniforms
        of its own torch.Generator (`repro.cpu_lm.generate.sample`, inverse CDF), so a response is the same
        whatever chunk, shard or resume draws it, and batching stays as wide as the chunk. Each distinct
        prompt of a batch is prefilled once for its k samples (`share_prompts`)."""
        torch = self._torch
        ids = [self.prompt_ids(p) for p in problems]  # once per problem: a chat template costs ~0.15 ms a call
        flat = [row_ids for row_ids, row in zip(ids, seeds, strict=True) for _ in row]
        width = self.max_new_tokens
        rows = [torch.rand(width, generator=torch.Generator().manual_seed(int(s))) for r in seeds for s in r]
        uniforms = torch.stack(rows) if rows else None
        return _regroup(self._sample(flat, None, uniforms, share_prompts=True), [len(row) for row in seeds])
