"""Will verl's vLLM server start for this cell, and serve its requests whole? The real stack's rules, on a CPU.

Three gates stand between a composed config and a first rollout on a GPU node, in this order:
1. verl's server (`_validate_configs`): a null `rollout.max_model_len` becomes the model's
   max_position_embeddings *after* `model.override_config`; an explicit one above it is refused;
2. vLLM (`_get_and_verify_max_len`): that length against what vLLM derives from the checkpoint's own
   config.json (override_config never reaches vLLM), refused unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1;
3. every request: verl caps a response at `max_model_len - prompt`, so a context shorter than
   prompt + response silently cuts the longest responses of the longest prompts.
`admit` applies all three (repro.vllm_rules) and says what it found; the dry run's preflight calls it
with the checkpoint facts of the catalog, the CPU rollout server with its model folder's real files. Given
the model's local folder (`folder`), gate 2 is the installed vLLM's own ModelConfig (its verdict, its words);
otherwise, and where vLLM is absent, the restatement decides.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.vllm_rules import (
    ALLOW_LONG_ENV,
    RESTATED,
    RESTATED_VERL,
    VLLMRefusal,
    check_max_model_len,
    verl_server_max_model_len,
)


@dataclass(frozen=True)
class Admission:
    max_model_len: int
    derived_from: str  # how the length was chosen, for the dry run
    judge: str = RESTATED  # who accepted it for vLLM: the installed vLLM itself, or the restatement

    def line(self, prompt_length: int, response_length: int, checkpoint_positions: int | None) -> str:
        fits = f"fits the checkpoint's {checkpoint_positions} positions" if checkpoint_positions else "fits"
        asked = f" ({self.judge}'s own check)" if self.judge != RESTATED else ""
        return (
            f"vLLM max_model_len: {self.max_model_len} ({self.derived_from}); prompt {prompt_length} + response "
            f"{response_length} = {prompt_length + response_length} tokens {fits}, as vLLM and verl require{asked}"
        )


def _positions(config: Mapping[str, Any]) -> int | None:
    value = config.get("max_position_embeddings")
    if value is None and isinstance(config.get("text_config"), Mapping):
        value = config["text_config"].get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def admit(
    max_model_len: int | None,
    prompt_length: int,
    response_length: int,
    checkpoint_config: Mapping[str, Any],
    override_config: Mapping[str, Any] | None = None,
    tokenizer_config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    whole_responses: bool = True,
    folder: str | Path | None = None,
) -> Admission:
    """The max_model_len verl's vLLM server would run this rollout with, or VLLMRefusal with the real reason.

    `whole_responses=False` applies only what the real stack refuses (the CPU rollout server); the preflight
    also refuses a context that would cut responses short, which verl does silently. `folder`: the model's
    local folder, for the installed vLLM to judge gate 2 itself (repro.vllm_rules.check_max_model_len)."""
    env = os.environ if env is None else env
    verl_view = {**checkpoint_config, **dict(override_config or {})}
    positions = _positions(verl_view)
    if positions is None:
        raise VLLMRefusal("max_position_embeddings not found in HFModelConfig!", RESTATED_VERL)  # verl's words
    length = verl_server_max_model_len(max_model_len, positions)
    how = "set explicitly" if max_model_len is not None else f"null: verl took max_position_embeddings={positions}"
    if override_config and "max_position_embeddings" in override_config and max_model_len is None:
        how += " from model.override_config"
    _, judge = check_max_model_len(length, checkpoint_config, tokenizer_config, env, folder)
    if whole_responses and prompt_length + response_length > length:
        raise VLLMRefusal(
            f"max_model_len ({length}) is shorter than max_prompt_length + max_response_length "
            f"({prompt_length} + {response_length}): verl caps each response at max_model_len - prompt, so the "
            "longest prompts would get cut responses",
            "repro's preflight",
        )
    return Admission(length, how, judge)


def runtime_env(cfg: Any) -> dict[str, str]:
    """The environment verl's server processes get: the driver's plus the config's Ray runtime env vars."""
    env = dict(os.environ)
    try:
        extra = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    except Exception:
        extra = None
    if extra:
        env.update({str(k): str(v) for k, v in dict(extra).items()})
    return env


__all__ = ["ALLOW_LONG_ENV", "Admission", "VLLMRefusal", "admit", "runtime_env"]
