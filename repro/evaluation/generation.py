"""Generation backends behind one interface: vLLM on GPUs, transformers on CPUs.

Both render prompts with the model's own chat template and the backbone's prompt template (system prompt
and instruction suffix, `repro.prompting`: the same chat as training and the difficulty filter) and
sample with temperature 1.0, top-p 1.0; `max_new_tokens` is 4096 for the paper's models and the tiny
model's own cap on CPU. A backend returns `n` response texts per prompt, in order, from a seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from repro import catalog
from repro.errors import ReproError
from repro.prompting import chat_messages

DEFAULT_TEMPLATE = "released"  # the paper's models; the tiny model's callers pass its own


class Generator(Protocol):
    def generate(self, problems: Sequence[str], n: int, seed: int) -> list[list[str]]: ...


def _template(template: catalog.PromptTemplate | None) -> catalog.PromptTemplate:
    return template if template is not None else catalog.prompt_template(DEFAULT_TEMPLATE)


class TransformersGenerator:
    """CPU sampling with the project's KV-cache loop (pure temperature sampling, no hidden top-k)."""

    def __init__(
        self,
        model_path: Path,
        max_new_tokens: int,
        temperature: float = 1.0,
        batch_size: int = 1024,
        template: catalog.PromptTemplate | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from repro.local.model import quiet_transformers

        quiet_transformers()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path)
        self.model.eval()
        self.max_new_tokens, self.temperature, self.batch_size = max_new_tokens, temperature, batch_size
        self.template = _template(template)
        self._torch = torch

    def generate(self, problems: Sequence[str], n: int, seed: int) -> list[list[str]]:
        from repro.local.generate import sample

        gen = self._torch.Generator().manual_seed(seed)
        prompts = [
            self.tokenizer.apply_chat_template(
                chat_messages(p, self.template), add_generation_prompt=True, tokenize=True
            )["input_ids"]
            for p in problems
        ]
        flat = [ids for ids in prompts for _ in range(n)]
        texts: list[str] = []
        for start in range(0, len(flat), self.batch_size):
            out = sample(
                self.model,
                flat[start : start + self.batch_size],
                max_new_tokens=self.max_new_tokens,
                eos_id=self.tokenizer.eos_token_id,
                pad_id=self.tokenizer.pad_token_id,
                generator=gen,
                temperature=self.temperature,
            )
            texts += self.tokenizer.batch_decode(out, skip_special_tokens=True)
        return [texts[i * n : (i + 1) * n] for i in range(len(problems))]


class VLLMGenerator:
    """GPU sampling with vLLM (the `gpu` extra): n samples per prompt in one request, seeded."""

    def __init__(
        self,
        model_path: Path,
        max_new_tokens: int = 4096,
        temperature: float = 1.0,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        template: catalog.PromptTemplate | None = None,
    ):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise ReproError(
                "vLLM is not installed; on a GPU machine run `bash scripts/setup-venv.sh gpu`, "
                "or use --backend transformers"
            ) from exc
        self._params = SamplingParams
        self.llm = LLM(
            model=str(model_path),
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.template = _template(template)

    def generate(self, problems: Sequence[str], n: int, seed: int) -> list[list[str]]:
        params = self._params(n=n, temperature=self.temperature, top_p=1.0, max_tokens=self.max_new_tokens, seed=seed)
        prompts = [
            self.tokenizer.apply_chat_template(
                chat_messages(p, self.template), add_generation_prompt=True, tokenize=False
            )
            for p in problems
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [[c.text for c in out.outputs] for out in outputs]


def make_generator(
    backend: str, model_path: Path, max_new_tokens: int, template: catalog.PromptTemplate | None = None
) -> Generator:
    if backend == "transformers":
        return TransformersGenerator(model_path, max_new_tokens, template=template)
    if backend == "vllm":
        return VLLMGenerator(model_path, max_new_tokens, template=template)
    raise ReproError(f"unknown backend {backend!r}; valid backends: transformers, vllm")
