"""A Hugging Face cache as huggingface_hub writes it, filled without the Hub (there is none here): a snapshot of a
backbone's repository with a real config.json, the family's real tokenizer files (tests/chat_tokenizers.py) and a
real safetensors file, laid out as `hub/models--ORG--NAME/{refs/main, snapshots/<commit>/<file> -> blobs/<sha256>}`.

Whatever reads it (huggingface_hub's `snapshot_download(local_files_only=True)`, transformers, the preflight) reads
it as it reads a cache the Hub filled.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from chat_tokenizers import model_folder

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # a snapshot folder is named by its 40-hex commit


def model_files(backbone: str, workdir: Path) -> dict[str, bytes]:
    """The files of a tiny but loadable model of `backbone`'s family: config.json, tokenizer, model.safetensors."""
    import torch
    from safetensors.torch import save

    folder = model_folder(workdir, backbone)
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
    files["model.safetensors"] = save({"lm_head.weight": torch.zeros(4, 2, dtype=torch.bfloat16)})
    return files


def populate(hub_cache: Path, repo_id: str, files: dict[str, bytes], commit: str = COMMIT) -> Path:
    """Write `files` as `repo_id`'s main revision into `hub_cache`; returns the snapshot folder."""
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
