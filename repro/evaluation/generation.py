"""Generation backends behind one interface: vLLM on GPUs, transformers on CPUs.

Both render prompts with the model's own chat template and the backbone's prompt template (system prompt
and instruction suffix, `repro.prompting`: the same chat as training and the difficulty filter) and
sample with temperature 1.0, top-p 1.0; `max_new_tokens` is 4096 for the paper's models and the tiny
model's own cap on CPU. A backend returns `n` response texts per prompt, in order, from a seed.
"""

from __future__ import annotations

import json
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
    """GPU sampling with vLLM (the `gpu` extra): n samples per prompt in one request, seeded.

    The context is the released eval's max_model_len (8192, benchmark_sources.yaml), not the model's
    configured length: Qwen2.5-Math's config says 4096 positions, which would leave 4096 tokens minus the
    prompt. vLLM refuses a longer max_model_len unless told: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 only skips
    that check and leaves the rotary tables at the configured length (garbage or a CUDA device-side
    assert past it, vLLM issue #17924 / PR #44286), while `hf_overrides` ("arguments to be forwarded to
    the Hugging Face config", vLLM ModelConfig) raises max_position_embeddings itself, as the released
    training script does (32768). So a model configured below max_model_len gets
    hf_overrides={"max_position_embeddings": max_model_len}; a longer-context model is left as it is.
    """

    def __init__(
        self,
        model_path: Path | str,
        max_new_tokens: int = 4096,
        temperature: float = 1.0,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        template: catalog.PromptTemplate | None = None,
        max_model_len: int | None = None,
    ):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise ReproError(
                "vLLM is not installed; on a GPU machine run `bash scripts/setup-venv.sh gpu`, "
                "or use --backend transformers"
            ) from exc
        from repro.evaluation.benchmarks import generation_setting

        self._params = SamplingParams
        self.max_model_len = int(max_model_len or generation_setting("max_model_len"))
        kwargs: dict = {
            "model": str(model_path),
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": self.max_model_len,
        }
        positions = configured_positions(model_path)
        if positions is not None and positions < self.max_model_len:
            kwargs["hf_overrides"] = {"max_position_embeddings": self.max_model_len}
        self.llm = LLM(**kwargs)
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


def configured_positions(model_path: Path | str) -> int | None:
    """max_position_embeddings of a model's config (a local folder's config.json, else the Hub's)."""
    local = Path(model_path) / "config.json"
    if local.is_file():
        config = json.loads(local.read_text())
    else:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(model_path)).to_dict()
    value = config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def make_generator(
    backend: str, model_path: Path, max_new_tokens: int, template: catalog.PromptTemplate | None = None
) -> Generator:
    if backend == "transformers":
        return TransformersGenerator(model_path, max_new_tokens, template=template)
    if backend == "vllm":
        return VLLMGenerator(model_path, max_new_tokens, template=template)
    raise ReproError(f"unknown backend {backend!r}; valid backends: transformers, vllm")
