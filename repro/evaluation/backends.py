"""The generator a backend name asks for (`--backend transformers|vllm`), for `repro eval` and the data filter."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from repro import catalog
from repro.errors import ReproError
from repro.evaluation.generation import Generator
from repro.evaluation.transformers_generator import TransformersGenerator
from repro.evaluation.vllm_generator import VLLMGenerator


def make_generator(
    backend: str,
    model_path: Path,
    max_new_tokens: int,
    template: catalog.PromptTemplate | None = None,
    problems: Sequence[str] = (),
    tensor_parallel_size: int = 1,
) -> Generator:
    """A backend's generator; `problems` (all that will be asked) size vLLM's context, and
    `tensor_parallel_size` (the backbone's catalog `eval_tensor_parallel_size`) is how many GPUs one vLLM
    replica spans; the CPU backend has no tensor parallelism and ignores it."""
    if backend == "transformers":
        return TransformersGenerator(model_path, max_new_tokens, template=template)
    if backend == "vllm":
        return VLLMGenerator(
            model_path, max_new_tokens, template=template, problems=problems, tensor_parallel_size=tensor_parallel_size
        )
    raise ReproError(f"unknown backend {backend!r}; valid backends: transformers, vllm")
