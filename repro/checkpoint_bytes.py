"""Bytes a parameter takes in each part of a verl FSDP checkpoint (verl/utils/checkpoint/fsdp_checkpoint_manager.py):
one table for the two estimates that read it, the preflight's disk (repro.verl_plugin.preflight) and the
allocation end's save time (repro.launch.allocation_end)."""

from __future__ import annotations

from collections.abc import Collection

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
OPTIMIZER_BYTES = 8  # AdamW's exp_avg and exp_avg_sq, fp32 like the master weights
# `hf_model`: verl 0.9.1 writes the gathered fp32 state dict (config.json says bfloat16, the tensors are
# float32): measured on a tiny-arith checkpoint, 321,376 bytes of model.safetensors for 79,680 parameters
HF_MODEL_BYTES = 4
DEFAULT_MODEL_DTYPE = "fp32"  # verl 0.9.1's actor fsdp_config.model_dtype (workers/config/engine.py)


def weight_bytes(model_dtype: object = DEFAULT_MODEL_DTYPE) -> int:
    """Bytes of one weight of the FSDP `model` shards: fsdp_config.model_dtype's width (4 for a name not in
    the table)."""
    return DTYPE_BYTES.get(str(model_dtype), 4)


def sharded_bytes(parts: Collection[str], model_dtype: object = DEFAULT_MODEL_DTYPE) -> int:
    """Bytes a parameter takes in the parts every rank writes its shard of: `model` and `optimizer`."""
    return ("model" in parts) * weight_bytes(model_dtype) + ("optimizer" in parts) * OPTIMIZER_BYTES


def hf_bytes(parts: Collection[str]) -> int:
    """Bytes a parameter takes in the Hugging Face weights rank 0 gathers and writes alone (`hf_model`)."""
    return ("hf_model" in parts) * HF_MODEL_BYTES


def save_bytes(parts: Collection[str], model_dtype: object = DEFAULT_MODEL_DTYPE) -> int:
    """Bytes a parameter takes in a whole save of `parts` (verl's actor.checkpoint.save_contents; `extra` is
    the RNG and scheduler state, no bytes a parameter)."""
    return sharded_bytes(parts, model_dtype) + hf_bytes(parts)
