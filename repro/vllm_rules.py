"""vLLM's admission rules for a model length and a request: vLLM's own verdict where vLLM is installed, a
restatement where it is not.

A stand-in that accepts what vLLM refuses makes a rehearsal pass where the first GPU run stops. So the CPU
rollout server, the tests' fake vLLM and the dry run's preflight all apply these rules:
- `check_max_model_len` asks the installed vLLM itself (`EngineArgs(...).create_model_config()`: vLLM's
  ModelConfig reads the folder's config.json and runs `_get_and_verify_max_len`; no engine, no weights, a few
  milliseconds once vLLM is imported) when the model's config is a local folder, and falls back to the
  restatement when vLLM is absent, the model is a Hub id (vLLM would ask the Hub), or vLLM cannot read the
  folder here. A refusal names its judge (`VLLMRefusal.judge`), so a dry run says whose words it prints.
- the restatement, transcribed from vLLM 0.27's `vllm/config/model.py` (`_get_and_verify_max_len`), its
  SamplingParams and v1 InputProcessor, and verl 0.9.1's vLLM server (`vllm_async_server.py`:
  `_validate_configs`, and the headroom check of `generate`). Messages are theirs word for word, tails
  included. tests/test_vllm_rules_real.py holds every case the suite uses against real vLLM and verl.

The restatement is framework-free on purpose (dicts in, ints out): a checkpoint's config.json is all it
reads. It reads the JSON as written, where vLLM reads it through transformers' config class (whose defaults
fill a key the file leaves out, and whose attribute maps rename some, such as GPT-2's n_positions), so on a
real checkpoint they agree and on a hand-written fragment vLLM's view is the one to trust.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
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
# the rest of vLLM's refusal of a long max_model_len, after its "set the env var ...=1."
_ALLOW_LONG_CAUTION = (
    f"{ALLOW_LONG_ENV} must be used with extreme caution. If the model uses relative position encoding (RoPE), "
    "positions exceeding derived_max_model_len lead to nan. If the model uses absolute position encoding, positions "
    "exceeding derived_max_model_len will cause a CUDA array out-of-bounds error."
)
RESTATED = "repro's restatement of vLLM's rule"
RESTATED_VERL = "repro's restatement of verl 0.9.1's rule"


class VLLMRefusal(ValueError):
    """What vLLM (or verl's vLLM server) raises for this configuration or request; `judge` says who decided:
    the installed vLLM itself, or the restatement here."""

    def __init__(self, message: str, judge: str = RESTATED) -> None:
        super().__init__(message)
        self.judge = judge


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


def _text_config(hf_config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text model's config of a multimodal checkpoint, else the config itself (vLLM get_hf_text_config)."""
    text = hf_config.get("text_config")
    return text if isinstance(text, Mapping) else hf_config


def _keyed_length(config: Mapping[str, Any]) -> tuple[float, str]:
    """The smallest length key of the text config (vLLM `derive_max_model_len_and_key`); inf when none."""
    derived, key = float("inf"), "none"
    for name in _LENGTH_KEYS:
        value = config.get(name)
        if isinstance(value, int | float) and value < derived:
            derived, key = value, name
    if config.get("model_max_length"):  # Command-R / Cohere: model_max_length wins outright
        derived, key = config["model_max_length"], "model_max_length"
    return float(derived), key


def derived_max_model_len(
    hf_config: Mapping[str, Any], tokenizer_config: Mapping[str, Any] | None = None
) -> tuple[float, str]:
    """vLLM's derived maximum length of a model and the key it came from (vLLM `_get_and_verify_max_len`).

    A float, as vLLM's own (its ModelArchitectureConfig stores it so; its message prints `4096.0`).
    `tokenizer_config` is not read: vLLM reads the tokenizer's model_max_length only for pooling models with
    absolute positions, and this project runs generation models."""
    del tokenizer_config
    config = _text_config(hf_config)
    derived, key = _keyed_length(config)
    if derived == float("inf"):
        derived, key = float(_DEFAULT_MAX_LEN), "default"
    rope = _rope(config)
    if rope and "gemma3" not in str(config.get("model_type", "")):  # Gemma 3's positions are already scaled
        factor = 1.0
        for params in rope:
            kind = params.get("rope_type") or params.get("type") or "default"
            if kind not in _UNSCALED_ROPE:
                factor = params.get("factor", factor)
                if kind == "yarn":
                    derived = params["original_max_position_embeddings"]
        derived *= 1.0 if factor is None else factor  # vLLM falls back to 1.0 for a null factor
    return float(derived), key


def _default_length(config: Mapping[str, Any], derived: float) -> int:
    """vLLM's max_model_len when none is given: the derived length, or a LongRoPE model's original positions."""
    if any((p.get("rope_type") or p.get("type")) == "longrope" for p in _rope(config)):
        return int(config.get("original_max_position_embeddings", derived))
    return int(derived)


def _allowed(env: Mapping[str, str]) -> bool:
    """vLLM's reading of VLLM_ALLOW_LONG_MAX_MODEL_LEN (vllm/envs.py)."""
    return str(env.get(ALLOW_LONG_ENV, "0")).strip().lower() in ("1", "true")


def verify_max_model_len(
    max_model_len: int | None,
    hf_config: Mapping[str, Any],
    tokenizer_config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """The max_model_len vLLM would run with, or its refusal (vLLM `_get_and_verify_max_len`), restated.

    `hf_config` is the checkpoint's config.json with vLLM's `hf_overrides` merged in: verl's
    `model.override_config` is not one of them (verl passes only quantization settings as hf_overrides).
    """
    env = os.environ if env is None else env
    config = _text_config(hf_config)
    auto = max_model_len is None or max_model_len == -1  # -1: vLLM fits the length to memory later
    if not auto and _keyed_length(config)[0] == float("inf"):
        return int(max_model_len)  # vLLM takes an explicit length when the config names none
    derived, key = derived_max_model_len(hf_config, tokenizer_config)
    if auto:
        return _default_length(config, derived)
    if max_model_len > derived:
        model_max_length = config.get("model_max_length")
        if model_max_length is None or max_model_len > model_max_length:
            msg = (
                f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
                f"({key}={derived} or model_max_length={model_max_length} in model's config.json)."
            )
            if not _allowed(env):
                raise VLLMRefusal(
                    f"{msg} To allow overriding this maximum, set the env var {ALLOW_LONG_ENV}=1. {_ALLOW_LONG_CAUTION}"
                )
    return int(max_model_len)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep vLLM's import and config notes (platform, Triton, architecture) off a dry run's console."""
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def _environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or unset, for None) these variables for the duration: vLLM reads them when asked."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            _set(name, value)
        yield
    finally:
        for name, value in saved.items():
            _set(name, value)


def _set(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _engine_args() -> Any | None:
    """vLLM's EngineArgs, or None where vLLM cannot be imported (absent, the tests' stand-in module, or a
    broken install: VLLM_CPU.md lists an OSError from a CUDA build of torchcodec)."""
    try:
        with _quiet():
            from vllm.engine.arg_utils import EngineArgs
    except Exception:
        return None
    return EngineArgs


def vllm_name() -> str:
    """The installed vLLM, as a judge is named: `vLLM 0.27.0+cpu`."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return f"vLLM {metadata.version(dist)}"
    return "vLLM"


def _cause(exc: BaseException) -> BaseException:
    """The error vLLM raised inside pydantic's ValidationError of its ModelConfig (the error itself otherwise)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            inner = errors()[0].get("ctx", {}).get("error")
            if isinstance(inner, BaseException):
                return inner
    return exc


def _envs_cached_otherwise(env: Mapping[str, str]) -> bool:
    """True when vLLM froze its environment (after an engine started here) with another opt-in value."""
    import sys

    envs = sys.modules.get("vllm.envs")
    cached = getattr(envs, "_is_envs_cache_enabled", None)
    return bool(cached and cached() and bool(envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN) != _allowed(env))


def vllm_max_model_len(
    folder: str | Path,
    max_model_len: int | None,
    hf_overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> int | None:
    """vLLM's own verdict on a local model folder: the max_model_len its ModelConfig settles on, or VLLMRefusal
    with vLLM's words; None when vLLM cannot be asked here (not installed, no config.json in the folder, or a
    folder vLLM cannot read on this machine: the restatement answers then). Never the Hub: a local folder only.

    `EngineArgs(...).create_model_config()` is the engine's own first step, without the engine: no weights, no
    tokenizer (skip_tokenizer_init), a few milliseconds once vLLM is imported (the import itself takes 6-20 s,
    and the first look at an architecture vLLM has not cached under ~/.cache/vllm/modelinfos 10-30 s more)."""
    folder = Path(folder)
    env = os.environ if env is None else env
    if not (folder / "config.json").is_file() or _envs_cached_otherwise(env):
        return None
    engine_args = _engine_args()
    if engine_args is None:
        return None
    overrides = dict(hf_overrides or {})
    try:
        with _quiet(), _environ({ALLOW_LONG_ENV: env.get(ALLOW_LONG_ENV)}):
            args = engine_args(model=str(folder), max_model_len=max_model_len, hf_overrides=overrides,
                               skip_tokenizer_init=True)  # fmt: skip
            config = args.create_model_config()
    except Exception as exc:
        cause = _cause(exc)
        if isinstance(cause, ValueError) and "max_model_len" in str(cause):  # `_get_and_verify_max_len` refused
            raise VLLMRefusal(str(cause), vllm_name()) from None
        return None  # vLLM cannot read this folder here (an architecture it lacks on this platform, ...)
    return int(config.max_model_len)


def check_max_model_len(
    max_model_len: int | None,
    hf_config: Mapping[str, Any],
    tokenizer_config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    folder: str | Path | None = None,
    hf_overrides: Mapping[str, Any] | None = None,
) -> tuple[int, str]:
    """(the max_model_len vLLM would run with, who said so), or VLLMRefusal: the installed vLLM itself when
    `folder` is the model's local folder and vLLM can read it, else the restatement (`verify_max_model_len`)
    on `hf_config` (the folder's config.json) with `hf_overrides` merged in, as vLLM merges them."""
    if folder is not None:
        found = vllm_max_model_len(folder, max_model_len, hf_overrides, env)
        if found is not None:
            return found, vllm_name()
    merged = {**hf_config, **dict(hf_overrides or {})}
    return verify_max_model_len(max_model_len, merged, tokenizer_config, env), RESTATED


def verl_server_max_model_len(max_model_len: int | None, max_position_embeddings: int) -> int:
    """verl 0.9.1's vLLM server (`_validate_configs`): a null max_model_len becomes the model's
    max_position_embeddings *after* `model.override_config`; a larger explicit one is refused."""
    if max_model_len is None:
        return int(max_position_embeddings)
    if max_model_len > max_position_embeddings:
        raise VLLMRefusal(
            f"max_model_len ({max_model_len}) should be less than or equal to max_position_embeddings "
            f"({max_position_embeddings})",
            RESTATED_VERL,
        )
    return int(max_model_len)


def _max_tokens_refusal(max_tokens: int | None) -> VLLMRefusal | None:
    """vLLM's SamplingParams refusal of a max_tokens below 1 (its VLLMValidationError, tail included)."""
    if max_tokens is not None and max_tokens < 1:
        return VLLMRefusal(
            f"max_tokens must be at least 1, got {max_tokens}. (parameter=max_tokens, value={max_tokens})"
        )
    return None


def verify_request(prompt_len: int, max_tokens: int | None, max_model_len: int) -> int:
    """A request's effective max_tokens through verl's vLLM server, or the refusal: verl needs one token of
    headroom (`generate`, its message) and caps max_tokens to what is left; vLLM's SamplingParams refuses a
    max_tokens below 1, and without one vLLM generates up to max_model_len (its InputProcessor)."""
    room = max_model_len - prompt_len
    if room < 1:
        raise VLLMRefusal(
            f"Prompt length ({prompt_len}) leaves no room to generate within the model's maximum context "
            f"length ({max_model_len}); need at least 1 token of headroom.",
            RESTATED_VERL,
        )
    refusal = _max_tokens_refusal(max_tokens)
    if refusal is not None:
        raise refusal
    return room if max_tokens is None else min(int(max_tokens), room)


def verify_vllm_request(prompt_len: int, max_tokens: int | None, max_model_len: int) -> int:
    """A token-ids request's effective max_tokens straight through vLLM (`LLM.generate`, no verl), or vLLM's
    refusal: its SamplingParams (max_tokens below 1), its renderer (a prompt longer than max_model_len) and its
    v1 InputProcessor (an empty prompt, or one that leaves no room). vLLM does not refuse a max_tokens past the
    context: the engine stops the request at max_model_len (finish reason `length`)."""
    refusal = _max_tokens_refusal(max_tokens)
    if refusal is not None:
        raise refusal
    if prompt_len > max_model_len:
        at_least = "at least " if prompt_len == max_model_len + 1 else ""  # vLLM truncates to one past the limit
        raise VLLMRefusal(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested 0 output tokens "
            f"and your prompt contains {at_least}{prompt_len} input tokens, for a total of {at_least}{prompt_len} "
            "tokens. Please reduce the length of the input prompt or the number of requested output tokens. "
            f"(parameter=input_tokens, value={prompt_len})"
        )
    if prompt_len == 0:
        raise VLLMRefusal("The decoder prompt cannot be empty")
    if prompt_len == max_model_len:
        raise VLLMRefusal(
            f"The decoder prompt (length {prompt_len}) plus the number of requested output tokens (at least 1) is "
            f"longer than the maximum model length of {max_model_len}. Make sure that `max_model_len` is no smaller "
            "than the number of text tokens (prompt + requested output tokens)."
        )
    room = max_model_len - prompt_len
    return room if max_tokens is None else min(int(max_tokens), room)
