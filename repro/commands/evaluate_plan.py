"""`repro eval`'s plan for one target: how it is generated (backend, token cap, prompt template, GPUs per vLLM
replica) and what every process of the evaluation samples and grades with; the parent and each shard make the
same plan from the same options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Settings:
    """What every process of one evaluation samples and grades with."""

    k: int
    seed: int
    grading: str
    max_new_tokens: int | None
    first_problems: int | None

    def mode(self, benchmark: str) -> str:
        from repro.evaluation.grading import benchmark_grading

        return benchmark_grading(benchmark) if self.grading == "released" else "boxed"


@dataclass(frozen=True)
class _Plan:
    """How one target is generated: backend, token cap, prompt template and GPUs per vLLM replica."""

    backend: str
    tokens: int
    template: Any
    tp: int

    @property
    def gpu(self) -> bool:
        """vLLM on GPUs (not PyPI's CPU build): shards take GPU groups, the summary records GPUs per shard."""
        from repro.evaluation.vllm_engine import vllm_device

        return self.backend == "vllm" and vllm_device() == "gpu"

    @property
    def engine(self) -> str:
        """What a shard's process runs, as repro.evaluation.shards splits machines: `vllm` (a group of GPUs),
        `vllm-cpu` (its own cores, its engine's OpenMP threads bound to them) or `transformers` (its cores)."""
        if self.backend == "vllm" and not self.gpu:
            return "vllm-cpu"
        return self.backend

    def generation(self, generator=None) -> dict:
        out = {"backend": self.backend, "max_new_tokens": self.tokens, "prompt_template": self.template.key}
        if getattr(generator, "max_model_len", None) is not None:
            out["max_model_len"] = generator.max_model_len
            out["max_model_len_reason"] = getattr(generator, "max_model_len_reason", None)
        return out


def _plan(backend: str, tgt, max_new_tokens: int | None) -> _Plan:
    from repro import catalog
    from repro.evaluation.generation import DEFAULT_TEMPLATE
    from repro.prompting import template_for

    chosen = backend
    if chosen == "auto":
        import torch

        # on a CPU, auto stays with transformers even where the vllm-cpu build is installed: its engine start
        # (about 30 s on 2 cores) is more than a CPU evaluation's decoding gains back (SmolLM2-135M, 64 and
        # 256 responses: transformers 30 s and 108 s end to end, vLLM 45 s and 154 s; bench_eval_backends.py)
        cpu = tgt.tiny or (tgt.backbone is not None and catalog.get_backbone(tgt.backbone).device == "cpu")
        chosen = "vllm" if (torch.cuda.is_available() and not cpu) else "transformers"
    listed = catalog.get_backbone(tgt.backbone).eval_max_new_tokens if tgt.backbone is not None else None
    tokens = max_new_tokens or listed or (16 if tgt.tiny else 4096)
    if tgt.backbone is not None:
        template = template_for(tgt.backbone)
        tp = catalog.get_backbone(tgt.backbone).eval_tensor_parallel_size
    else:
        template = catalog.prompt_template("tiny" if tgt.tiny else DEFAULT_TEMPLATE)
        tp = 1
    return _Plan(chosen, tokens, template, tp)
