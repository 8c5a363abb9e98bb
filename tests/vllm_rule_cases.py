"""Every case the suite puts to `repro.vllm_rules`, in one table with what the real stack answers.

tests/test_vllm_admission.py asserts the restatement gives these answers; tests/test_vllm_rules_real.py asks
real vLLM (and verl's real vLLM server code) for its verdict on each, so the restatement cannot drift from
vLLM unnoticed. A refusal is written out whole, tail included, as vLLM 0.27 / verl 0.9.1 print it. Configs are
real checkpoints' config.json where the suite means a real backbone (the length keys and rope settings are
what vLLM reads), with the model_type vLLM needs to read any config at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_CAUTION = (
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position encoding "
    "(RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses absolute position encoding, "
    "positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error."
)


def too_long(asked: int, key: str, derived: float, model_max_length: int | None = None) -> str:
    """vLLM's whole refusal of a max_model_len above the derived one (vllm/config/model.py)."""
    return (
        f"User-specified max_model_len ({asked}) is greater than the derived max_model_len ({key}={derived} or "
        f"model_max_length={model_max_length} in model's config.json). To allow overriding this maximum, set the "
        f"env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {_CAUTION}"
    )


# Qwen/Qwen2.5-Math-1.5B and -7B (the length keys of their config.json), as tests/test_vllm_admission.py uses it
QWEN_MATH = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "max_position_embeddings": 4096,
             "rope_theta": 10000.0}  # fmt: skip
# meta-llama/Llama-3.2-3B-Instruct: llama3 rope, whose factor is already in the 131072 positions
LLAMA_3_2 = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 131072,
             "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}}  # fmt: skip
# Qwen/Qwen3-4B-Instruct-2507
QWEN3_4B = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "max_position_embeddings": 262144,
            "rope_theta": 5000000.0}  # fmt: skip
# tiny-arith's model (repro/cpu_lm/model.py: a Qwen2 of 64 positions), the CPU rollout server's
TINY = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "max_position_embeddings": 64}
# tests/chat_tokenizers.py `model_folder(..., "qwen2.5-math-1.5b", 4096)`: what the evaluation tests load
EVAL_FOLDER = {"model_type": "qwen2", "max_position_embeddings": 4096, "vocab_size": 259}
EVAL_TOKENIZER = {"model_max_length": 131072}  # Qwen2.5-Math's tokenizer_config.json
# a yarn-scaled Qwen (Qwen2.5 long-context recipe): original positions x factor
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
QWEN_YARN = {"model_type": "qwen2", "max_position_embeddings": 131072, "rope_scaling": YARN}
# a config with none of vLLM's length keys (transformers' MambaConfig has none)
NO_KEY = {"model_type": "mamba"}
# a multimodal-style config whose length is in text_config (Gemma 3's, served text-only)
TEXT_CONFIG = {"model_type": "gemma3", "architectures": ["Gemma3ForCausalLM"],
               "text_config": {"model_type": "gemma3_text", "max_position_embeddings": 8192}}  # fmt: skip
N_POSITIONS = {"model_type": "qwen2", "n_positions": 1024, "max_position_embeddings": 2048}
POSITIONS_8192 = {"max_position_embeddings": 8192}  # vLLM's hf_overrides, as repro's evaluation passes them


@dataclass(frozen=True)
class LengthCase:
    """vLLM's max_model_len rule (`_get_and_verify_max_len`): a config.json, the length asked for, the answer."""

    name: str
    config: dict[str, Any]
    max_model_len: int | None
    expected: int | str  # the max_model_len vLLM runs with, or its whole refusal
    key: str | None = None  # the key the derived length comes from, where the suite checks it
    hf_overrides: dict[str, Any] = field(default_factory=dict)
    tokenizer_config: dict[str, Any] | None = None
    allow_long: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1


# fmt: off
LENGTH_CASES = [
    LengthCase("qwen2.5-math: its own 4096", QWEN_MATH, None, 4096, "max_position_embeddings"),
    LengthCase("the smallest key wins", N_POSITIONS, None, 1024, "n_positions"),
    LengthCase("no key: vLLM assumes 2048", NO_KEY, None, 2048),
    LengthCase("no key: an explicit length stands", NO_KEY, 4096, 4096),
    LengthCase("yarn: original positions x factor", QWEN_YARN, None, 131072, "max_position_embeddings"),
    LengthCase("llama3 rope is not multiplied", LLAMA_3_2, None, 131072, "max_position_embeddings"),
    LengthCase("the tokenizer's limit is not read", QWEN_MATH, None, 4096, tokenizer_config={"model_max_length": 2048}),
    LengthCase("text_config holds the length", TEXT_CONFIG, None, 8192, "max_position_embeddings"),
    LengthCase("text_config: longer refused", TEXT_CONFIG, 16384, too_long(16384, "max_position_embeddings", 8192.0)),
    LengthCase("old override list: refused", QWEN_MATH, 32768, too_long(32768, "max_position_embeddings", 4096.0)),
    LengthCase("old override list, opted in", QWEN_MATH, 32768, 32768, allow_long=True),
    LengthCase("a GPU cell's 3072", QWEN_MATH, 3072, 3072),
    LengthCase("hf_overrides raise the positions", QWEN_MATH, 8192, 8192, hf_overrides=POSITIONS_8192),
    LengthCase("llama-3.2 GPU cell", LLAMA_3_2, 3072, 3072),
    LengthCase("llama-3.2 at 32768", LLAMA_3_2, 32768, 32768),
    LengthCase("qwen3-4b GPU cell", QWEN3_4B, 3072, 3072),
    LengthCase("qwen3-4b at 32768", QWEN3_4B, 32768, 32768),
    LengthCase("eval folder at 8192 refused", EVAL_FOLDER, 8192, too_long(8192, "max_position_embeddings", 4096.0),
               tokenizer_config=EVAL_TOKENIZER),
    LengthCase("eval folder, hf_overrides", EVAL_FOLDER, 8192, 8192, hf_overrides=POSITIONS_8192,
               tokenizer_config=EVAL_TOKENIZER),
    LengthCase("eval folder, opted in", EVAL_FOLDER, 8192, 8192, tokenizer_config=EVAL_TOKENIZER, allow_long=True),
    LengthCase("tiny model at its 64", TINY, 64, 64),
    LengthCase("tiny model at 128 refused", TINY, 128, too_long(128, "max_position_embeddings", 64.0)),
    LengthCase("tiny model at 128, opted in", TINY, 128, 128, allow_long=True),
]
# fmt: on


@dataclass(frozen=True)
class ServerCase:
    """verl's vLLM server (`_validate_configs`): rollout.max_model_len against the positions after
    model.override_config."""

    name: str
    config: dict[str, Any]
    override: dict[str, Any]
    max_model_len: int | None
    expected: int | str

    @property
    def positions(self) -> int:
        return int({**self.config, **self.override}["max_position_embeddings"])


def _above(asked: int, positions: int) -> str:
    return f"max_model_len ({asked}) should be less than or equal to max_position_embeddings ({positions})"


SERVER_CASES = [
    ServerCase("null takes the positions", QWEN_MATH, {}, None, 4096),
    ServerCase("null takes the override's", QWEN_MATH, {"max_position_embeddings": 32768}, None, 32768),
    ServerCase("explicit within the override", QWEN_MATH, {"max_position_embeddings": 32768}, 3072, 3072),
    ServerCase("explicit above the positions", QWEN_MATH, {}, 8192, _above(8192, 4096)),
    ServerCase("tiny: null", TINY, {}, None, 64),
    ServerCase("tiny: 64", TINY, {}, 64, 64),
    ServerCase("tiny: 128 above", TINY, {}, 128, _above(128, 64)),
    ServerCase("tiny: 128 with the override", TINY, {"max_position_embeddings": 128}, 128, 128),
]


@dataclass(frozen=True)
class RequestCase:
    """One request: its prompt length, max_tokens, the context, and the max_tokens it runs with or the refusal."""

    name: str
    prompt_len: int
    max_tokens: int | None
    max_model_len: int
    expected: int | str


def _no_room(prompt_len: int, max_model_len: int) -> str:
    return (
        f"Prompt length ({prompt_len}) leaves no room to generate within the model's maximum context length "
        f"({max_model_len}); need at least 1 token of headroom."
    )


def _max_tokens(value: int) -> str:
    return f"max_tokens must be at least 1, got {value}. (parameter=max_tokens, value={value})"


# through verl's vLLM server (`repro.vllm_rules.verify_request`): verl's headroom and cap, vLLM's max_tokens rule
VERL_REQUEST_CASES = [
    RequestCase("capped to the room", 1000, 4096, 3072, 2072),
    RequestCase("unset: up to the context", 10, None, 64, 54),
    RequestCase("no headroom", 3072, 16, 3072, _no_room(3072, 3072)),
    RequestCase("no headroom, unset", 64, None, 64, _no_room(64, 64)),
    RequestCase("max_tokens 0", 10, 0, 64, _max_tokens(0)),
]


def _beyond(prompt_len: int, max_model_len: int) -> str:
    at_least = "at least " if prompt_len == max_model_len + 1 else ""
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, you requested 0 output tokens and "
        f"your prompt contains {at_least}{prompt_len} input tokens, for a total of {at_least}{prompt_len} tokens. "
        "Please reduce the length of the input prompt or the number of requested output tokens. "
        f"(parameter=input_tokens, value={prompt_len})"
    )


def _full(max_model_len: int) -> str:
    return (
        f"The decoder prompt (length {max_model_len}) plus the number of requested output tokens (at least 1) is "
        f"longer than the maximum model length of {max_model_len}. Make sure that `max_model_len` is no smaller than "
        "the number of text tokens (prompt + requested output tokens)."
    )


# straight through vLLM (`repro.vllm_rules.verify_vllm_request`, the tests' fake vLLM): vLLM's own words
VLLM_REQUEST_CASES = [
    RequestCase("stopped at the context", 10, 100, 64, 54),
    RequestCase("unset: up to the context", 10, None, 64, 54),
    RequestCase("one token of room", 63, 5, 64, 1),
    RequestCase("a full prompt", 64, 5, 64, _full(64)),
    RequestCase("one token too long", 65, 5, 64, _beyond(65, 64)),
    RequestCase("far too long", 70, 5, 64, _beyond(70, 64)),
    RequestCase("an empty prompt", 0, 5, 64, "The decoder prompt cannot be empty"),
    RequestCase("max_tokens 0", 10, 0, 64, _max_tokens(0)),
]
