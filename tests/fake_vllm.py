"""A strict stand-in for the `vllm` package, shared by the tests: it accepts only what vLLM accepts.

`install(monkeypatch)` puts a `vllm` module with `LLM` and `SamplingParams` into sys.modules and returns
a `FakeVLLM` that records every engine and request. Like vLLM:
- `LLM(model=FOLDER, max_model_len=..., hf_overrides=...)` reads FOLDER/config.json with `hf_overrides`
  merged in (and tokenizer_config.json) and applies vLLM's max_model_len rule
  (`repro.vllm_rules.verify_max_model_len`, which honours VLLM_ALLOW_LONG_MAX_MODEL_LEN); unknown engine
  arguments are a TypeError; `get_tokenizer()` is the folder's Hugging Face tokenizer.
- `generate(prompts, sampling_params, use_tqdm=...)` takes a prompt or a list of them, each a string
  (tokenized with the tokenizer's special tokens, as vLLM does) or `{"prompt_token_ids": [int, ...]}`
  (vLLM's TokensPrompt: used as it is), and one SamplingParams or a list of the same length; a prompt
  without room in max_model_len is refused in vLLM's words (`repro.vllm_rules.verify_vllm_request`). It returns
  RequestOutput-like objects, in request order, with `.prompt_token_ids` and `.outputs[j].text` /
  `.token_ids`.
- `SamplingParams` validates as vLLM's `_verify_args` does (n >= 1, temperature >= 0, 0 < top_p <= 1,
  max_tokens >= 1 when given, seed an int or None) and refuses unknown arguments.
Responses come from `FakeVLLM.respond(prompt_ids, params, j) -> str` (default: `\\boxed{4}`).
"""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.vllm_rules import verify_max_model_len, verify_vllm_request

_SAMPLING_ARGS = {
    "n": 1,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "max_tokens": 16,  # vLLM's default
    "seed": None,
    "stop": None,
    "logprobs": None,
}
_ENGINE_ARGS = {
    "model",
    "tokenizer",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "max_model_len",
    "hf_overrides",
    "seed",
    "dtype",
    "trust_remote_code",
    "enforce_eager",
    "enable_prefix_caching",
    "enable_chunked_prefill",
}


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(_SAMPLING_ARGS)
        if unknown:
            raise TypeError(f"SamplingParams got unexpected keyword arguments {sorted(unknown)}")
        values = {**_SAMPLING_ARGS, **kwargs}
        n, temperature, top_p, max_tokens, seed = (
            values[k] for k in ("n", "temperature", "top_p", "max_tokens", "seed")
        )
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be at least 1, got {n}.")
        if temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {temperature}.")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.__dict__.update(values)
        self.kwargs = dict(kwargs)  # what the caller set

    def __repr__(self) -> str:
        return f"SamplingParams({self.kwargs})"


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str = "stop"


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


@dataclass
class Request:
    """One request as the engine saw it: the ids it ran on and its parameters."""

    prompt_token_ids: list[int]
    params: SamplingParams
    max_tokens: int
    given_as: str  # "text" or "tokens"


@dataclass
class FakeVLLM:
    respond: Callable[[list[int], SamplingParams, int], str] = lambda _ids, _params, _j: "\\boxed{4}"
    engines: list[dict] = field(default_factory=list)  # constructor kwargs of each LLM
    calls: list[list[Request]] = field(default_factory=list)  # each generate call's requests

    @property
    def requests(self) -> list[Request]:
        return [r for call in self.calls for r in call]

    def module(self) -> types.ModuleType:
        fake = self

        class LLM:
            def __init__(self, model: str, **kwargs: Any) -> None:
                unknown = set(kwargs) - _ENGINE_ARGS
                if unknown:
                    raise TypeError(f"EngineArgs.__init__() got unexpected keyword arguments {sorted(unknown)}")
                folder = Path(model)
                if not (folder / "config.json").is_file():
                    raise OSError(f"{model} is not a local folder with a config.json (the fake has no Hub)")
                config = json.loads((folder / "config.json").read_text())
                config.update(kwargs.get("hf_overrides") or {})
                tok_file = folder / "tokenizer_config.json"
                tok_config = json.loads(tok_file.read_text()) if tok_file.is_file() else None
                self.max_model_len = verify_max_model_len(kwargs.get("max_model_len"), config, tok_config, os.environ)
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(folder)
                fake.engines.append({"model": model, **kwargs})

            def get_tokenizer(self):
                return self._tokenizer

            def generate(self, prompts, sampling_params=None, use_tqdm: bool = True, **kwargs: Any):
                if kwargs:
                    raise TypeError(f"LLM.generate() got unexpected keyword arguments {sorted(kwargs)}")
                single = isinstance(prompts, str | dict)
                items = [prompts] if single else list(prompts)
                if sampling_params is None:
                    params = [SamplingParams()] * len(items)
                elif isinstance(sampling_params, SamplingParams):
                    params = [sampling_params] * len(items)
                elif isinstance(sampling_params, Sequence) and all(
                    isinstance(p, SamplingParams) for p in sampling_params
                ):
                    params = list(sampling_params)
                    if len(params) != len(items):
                        raise ValueError("The lengths of prompts and sampling_params must be the same.")
                else:
                    raise TypeError(
                        f"sampling_params must be SamplingParams or a list of them, got {sampling_params!r}"
                    )
                requests, outputs = [], []
                for i, (item, p) in enumerate(zip(items, params, strict=True)):
                    text, ids, given_as = self._ids(item)
                    max_tokens = verify_vllm_request(len(ids), p.max_tokens, self.max_model_len)
                    requests.append(Request(ids, p, max_tokens, given_as))
                    completions = []
                    for j in range(p.n):
                        response = fake.respond(ids, p, j)
                        token_ids = self._tokenizer.encode(response, add_special_tokens=False)[:max_tokens]
                        completions.append(CompletionOutput(j, self._tokenizer.decode(token_ids), token_ids))
                    outputs.append(RequestOutput(str(i), text, ids, completions))
                fake.calls.append(requests)
                return outputs

            def _ids(self, item) -> tuple[str | None, list[int], str]:
                if isinstance(item, str):  # vLLM tokenizes text with the tokenizer's special tokens
                    return item, list(self._tokenizer(item)["input_ids"]), "text"
                if isinstance(item, dict):
                    if set(item) != {"prompt_token_ids"}:
                        raise ValueError(f"a TokensPrompt takes prompt_token_ids (only, here), got {sorted(item)}")
                    ids = item["prompt_token_ids"]
                    if not isinstance(ids, list) or not all(
                        isinstance(t, int) and not isinstance(t, bool) for t in ids
                    ):
                        raise TypeError("prompt_token_ids must be a list of ints")
                    if not ids:
                        raise ValueError("The decoder prompt cannot be empty")
                    return None, list(ids), "tokens"
                raise TypeError(f"a prompt is a string or a TokensPrompt dict, got {type(item).__name__}")

        module = types.ModuleType("vllm")
        module.LLM, module.SamplingParams = LLM, SamplingParams
        module.RequestOutput, module.CompletionOutput = RequestOutput, CompletionOutput
        return module


def install(monkeypatch, respond: Callable[[list[int], SamplingParams, int], str] | None = None) -> FakeVLLM:
    """Replace `vllm` for one test; returns the recorder."""
    fake = FakeVLLM() if respond is None else FakeVLLM(respond=respond)
    monkeypatch.setitem(sys.modules, "vllm", fake.module())
    return fake
