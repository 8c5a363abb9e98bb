"""vLLM's admission rules for a model length and a request, restated so a CPU machine can apply them.

The CPU rehearsal cannot import vLLM, and a stand-in that accepts what vLLM refuses makes a rehearsal pass
where the first GPU run stops. So the CPU rollout server, the tests' fake vLLM and the dry run's preflight
all apply these rules, transcribed from vLLM's `vllm/config/model.py` (`_get_and_verify_max_len`) and
verl 0.9.1's vLLM server (`vllm_async_server.py`: `_validate_configs`, and the headroom check of
`generate`). Messages are vLLM's and verl's own, so a user who meets one here meets the same words there.

Framework-free on purpose (dicts in, ints out): a checkpoint's config.json is all it reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"

# vLLM's keys for a model's maximum length, in its order; the smallest present wins.
_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_DEFAULT_MAX_LEN = 2048  # vLLM's assumption when no key is present
# rope types whose factor vLLM does not multiply into the derived length (it is already in the positions)
_UNSCALED_ROPE = ("su", "longrope", "llama3")


class VLLMRefusal(ValueError):
    """What vLLM (or verl's vLLM server) raises for this configuration or request."""


def read_model_config(model_path: str | Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """config.json and tokenizer_config.json (None if absent) of a local model folder."""
    folder = Path(model_path)
    config = json.loads((folder / "config.json").read_text())
    tok = folder / "tokenizer_config.json"
    return config, (json.loads(tok.read_text()) if tok.is_file() else None)


def _rope(hf_config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The rope parameter sets (transformers 5 `rope_parameters`, older `rope_scaling`)."""
    params = hf_config.get("rope_parameters") or hf_config.get("rope_scaling")
    if not params:
        return []
    if all(isinstance(v, Mapping) for v in params.values()):  # per layer type
        return list(params.values())
    return [params]


def derived_max_model_len(
    hf_config: Mapping[str, Any], tokenizer_config: Mapping[str, Any] | None = None
) -> tuple[float, str]:
    """vLLM's derived maximum length of a model and the key it came from (vLLM `_get_and_verify_max_len`)."""
    # vLLM reads the text model's config of a multimodal checkpoint (get_hf_text_config)
    text = hf_config.get("text_config")
    config = text if isinstance(text, Mapping) else hf_config
    derived, key = float("inf"), "none"
    for name in _LENGTH_KEYS:
        value = config.get(name)
        if isinstance(value, int | float) and value < derived:
            derived, key = value, name
    if config.get("model_max_length"):
        derived, key = config["model_max_length"], "model_max_length"
    if tokenizer_config and isinstance(tokenizer_config.get("model_max_length"), int | float):
        derived = min(derived, tokenizer_config["model_max_length"])
    if derived == float("inf"):
        derived, key = _DEFAULT_MAX_LEN, "default"
    rope = _rope(config)
    if rope and "gemma3" not in str(config.get("model_type", "")):
        factor = 1.0
        for params in rope:
            kind = params.get("rope_type") or params.get("type") or "default"
            if kind not in _UNSCALED_ROPE:
                factor = params.get("factor", factor)
                if kind == "yarn":
                    derived = params["original_max_position_embeddings"]
        derived *= factor
    return derived, key


def verify_max_model_len(
    max_model_len: int | None,
    hf_config: Mapping[str, Any],
    tokenizer_config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """The max_model_len vLLM would run with, or its refusal (vLLM `_get_and_verify_max_len`).

    `hf_config` is the checkpoint's config.json with vLLM's `hf_overrides` merged in: verl's
    `model.override_config` is not one of them (verl passes only quantization settings as hf_overrides).
    """
    env = os.environ if env is None else env
    derived, key = derived_max_model_len(hf_config, tokenizer_config)
    if max_model_len is None:
        return int(derived)
    if max_model_len > derived:
        model_max_length = hf_config.get("model_max_length")
        if model_max_length is None or max_model_len > model_max_length:
            msg = (
                f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
                f"({key}={derived} or model_max_length={model_max_length} in model's config.json)."
            )
            if str(env.get(ALLOW_LONG_ENV, "")).strip().lower() not in ("1", "true"):
                raise VLLMRefusal(f"{msg} To allow overriding this maximum, set the env var {ALLOW_LONG_ENV}=1.")
    return int(max_model_len)


def verl_server_max_model_len(max_model_len: int | None, max_position_embeddings: int) -> int:
    """verl 0.9.1's vLLM server (`_validate_configs`): a null max_model_len becomes the model's
    max_position_embeddings *after* `model.override_config`; a larger explicit one is refused."""
    if max_model_len is None:
        return int(max_position_embeddings)
    if max_model_len > max_position_embeddings:
        raise VLLMRefusal(
            f"max_model_len ({max_model_len}) should be less than or equal to max_position_embeddings "
            f"({max_position_embeddings})"
        )
    return int(max_model_len)


def verify_request(prompt_len: int, max_tokens: int | None, max_model_len: int) -> int:
    """A request's effective max_tokens, or the refusal: verl's server needs one token of headroom
    (`generate`) and caps max_tokens to what is left, as vLLM stops a request at max_model_len."""
    room = max_model_len - prompt_len
    if room < 1:
        raise VLLMRefusal(
            f"Prompt length ({prompt_len}) leaves no room to generate within the model's maximum context "
            f"length ({max_model_len}); need at least 1 token of headroom."
        )
    if max_tokens is not None and max_tokens < 1:
        raise VLLMRefusal(f"max_tokens must be at least 1, got {max_tokens}.")
    return room if max_tokens is None else min(int(max_tokens), room)
