"""verl 0.9.1's checkpoint layout, written small: what `global_step_<k>` holds after an FSDP save with hf_model
(utils/checkpoint/fsdp_checkpoint_manager.py, trainer/ppo/v1/trainer_base.py _save_checkpoint), with fp32
Hugging Face weights as verl writes them. The retention tests slim these; the Slurm continuation test's
stand-in trainer writes them in real allocations."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

TRACKER = "latest_checkpointed_iteration.txt"
RESUME_PARTS = (  # what only a resume reads: every file of a save but actor/huggingface
    "actor/model_world_size_1_rank_0.pt",
    "actor/optim_world_size_1_rank_0.pt",
    "actor/extra_state_world_size_1_rank_0.pt",
    "actor/fsdp_config.json",
    "data.pt",
    "reinforce_ada_state.json",
)


def weights(step: int) -> dict[str, torch.Tensor]:
    """The save's Hugging Face tensors: fp32 matrices (what slimming casts) and an int64 buffer (copied)."""
    g = torch.Generator().manual_seed(step)
    return {
        "model.embed_tokens.weight": torch.randn(64, 48, generator=g),
        "model.layers.0.mlp.up_proj.weight": torch.randn(48, 96, generator=g),
        "model.norm.weight": 1 + 1e-3 * torch.randn(48, generator=g),
        "model.position_ids": torch.arange(16),
    }


def write_save(checkpoints: Path, step: int, *, sharded: bool = False, tracker: bool = True) -> Path:
    """One save as verl leaves it; `sharded`: the weights in two files and an index, as save_pretrained
    writes a model over its shard size. The tracker file is written last, as verl does."""
    save = checkpoints / f"global_step_{step}"
    hf = save / "actor" / "huggingface"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "dtype": "bfloat16"}))
    (hf / "tokenizer_config.json").write_text("{}")
    tensors = weights(step)
    if sharded:
        names = sorted(tensors)
        files = {n: f"model-0000{1 + (i % 2)}-of-00002.safetensors" for i, n in enumerate(names)}
        for file in sorted(set(files.values())):
            save_file({n: tensors[n] for n in names if files[n] == file}, hf / file, metadata={"format": "pt"})
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": files}
        (hf / "model.safetensors.index.json").write_text(json.dumps(index))
    else:
        save_file(tensors, hf / "model.safetensors", metadata={"format": "pt"})
    for part in RESUME_PARTS:
        (save / part).write_bytes(bytes(range(256)) * (16 if part.endswith(".pt") else 1))
    if tracker:
        (checkpoints / TRACKER).write_text(str(step))
    return save


def fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under `folder`: size and sha1, to show a save was not touched."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, hashlib.sha1(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
