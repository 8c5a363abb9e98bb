"""Is a local model folder loadable: its weight files, and every shard its index names. Below both evaluation
(repro.evaluation.runner) and the weights cache (repro.weights_cache), which ask the same question."""

from __future__ import annotations

import json
from pathlib import Path

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def missing_weights(model: Path) -> str | None:
    """Why a local model folder cannot be loaded (no weight file, or a shard its index names is absent), or
    None: transformers and vLLM would only say so with a traceback after the model was half set up."""
    present = [name for name in WEIGHT_FILES if (model / name).is_file()]
    if not present:
        return f"holds no model weights ({', '.join(WEIGHT_FILES[::2])})"
    for index in (name for name in present if name.endswith(".index.json")):
        try:
            shards = set(json.loads((model / index).read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError):
            return f"has an unreadable {index}"
        absent = sorted(shard for shard in shards if not (model / shard).is_file())
        if absent:
            return f"lacks {len(absent)} weight shard(s) that {index} names ({absent[0]}, ...)"
    return None
