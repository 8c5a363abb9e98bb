"""Older verl saves slimmed to their bf16 Hugging Face weights, so a run keeps every save's weights on disk.

Why: verl prunes only the saves of its own process, and it prunes by deleting whole actor folders. Across
Slurm allocations full saves pile up (a 7B save is ~122 GB: fp32 FSDP shards, AdamW's moments, the fp32
`hf_model` copy), while the paper's curves need the weights of every save (every 50 steps). A save that no
resume will load needs only its weights, and evaluation reads them in bf16 anyway (vLLM), so an older save
keeps `actor/huggingface/` with its safetensors rewritten from fp32 to bf16 (half the bytes) and loses the
resume-only parts (FSDP model / optimizer / extra shards, data.pt, TransferQueue and plugin state).

What is never slimmed: the newest `keep` saves and the one the tracker file names (what verl's
`resume_mode=auto` loads). A save without Hugging Face weights (hf_model not saved) is left whole: its
FSDP shards are its only weights.

Crash safety: each safetensors file is written tensor by tensor into a temp file beside it, fsynced and
renamed over the original, so a reader (an evaluation) sees the whole fp32 file or the whole bf16 one and
memory stays at one chunk. The marker file `slimmed.json` is written first ("slimming", with the bytes
before) and last ("slimmed", with what was done), so a slim cut short is finished by the next call with
its first byte count intact. Framework-free: no verl or Ray here; callers decide when (repro.rundir.retention).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from repro.atomic import write_text, write_with
from repro.rundir.checkpoints import LATEST_FILE

MARKER = "slimmed.json"
HF_PARTS = ("actor", "huggingface")  # verl's Hugging Face folder inside global_step_<k> (hf_model)
SLIM_DTYPE = "bfloat16"
_STEP_DIR_RE = re.compile(r"global_step_(\d+)")
_CHUNK_BYTES = 1 << 26  # fp32 read and cast at a time (64 MiB in, 32 MiB out), whatever the tensor's size
_HEADER_LIMIT = 100 << 20  # safetensors' own bound on a header


@dataclass(frozen=True)
class Slimmed:
    """What slimming one save did (the marker file's final content, less its timestamps)."""

    step: int
    bytes_before: int  # the whole global_step_<k> folder
    bytes_after: int
    weight_files: int  # safetensors files rewritten in bf16
    removed: tuple[str, ...]  # resume-only parts deleted, relative to the save folder


def verl_saves(checkpoints_dir: Path) -> dict[int, Path]:
    """verl's saves under `checkpoints_dir`: global_step_<k> folders that still hold an actor/ folder
    (verl's own pruning leaves data.pt behind in folders whose actor/ it deleted)."""
    if not checkpoints_dir.is_dir():
        return {}
    out = {}
    for entry in checkpoints_dir.iterdir():
        match = _STEP_DIR_RE.fullmatch(entry.name)
        if match and (entry / "actor").is_dir():
            out[int(match.group(1))] = entry
    return out


def tracker_step(checkpoints_dir: Path) -> int | None:
    """The step verl's tracker file names: the save `resume_mode=auto` loads."""
    try:
        return int((checkpoints_dir / LATEST_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def hf_folder(save: Path) -> Path:
    return save.joinpath(*HF_PARTS)


def has_hf_weights(save: Path) -> bool:
    return any(hf_folder(save).glob("*.safetensors"))


def read_marker(save: Path) -> dict | None:
    try:
        marker = json.loads((save / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def is_slimmed(save: Path) -> bool:
    return (read_marker(save) or {}).get("state") == "slimmed"


def to_slim(checkpoints_dir: Path, keep: int) -> tuple[list[int], list[int]]:
    """(saves to slim, saves left whole because they hold no Hugging Face weights), oldest first: every
    save but the newest `keep` and the tracker's, not slimmed yet."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the save a resume loads), got {keep}")
    saves = verl_saves(checkpoints_dir)
    protected = set(sorted(saves)[-keep:])
    tracked = tracker_step(checkpoints_dir)
    if tracked is not None:
        protected.add(tracked)
    older = [s for s in sorted(saves) if s not in protected and not is_slimmed(saves[s])]
    return [s for s in older if has_hf_weights(saves[s])], [s for s in older if not has_hf_weights(saves[s])]


def slim_older_saves(checkpoints_dir: Path, keep: int, why: str) -> tuple[list[Slimmed], list[int]]:
    """Slim every save `to_slim` names; returns what was done and the steps left whole (no HF weights)."""
    steps, whole = to_slim(checkpoints_dir, keep)
    return [slim_save(checkpoints_dir / f"global_step_{s}", why) for s in steps], whole


def slim_save(save: Path, why: str) -> Slimmed:
    """Slim one save: its HF safetensors to bf16, its index updated, everything else but actor/huggingface
    deleted, the marker written first and last. Idempotent (a slimmed save is returned as it is)."""
    step = int(_STEP_DIR_RE.fullmatch(save.name).group(1))  # type: ignore[union-attr]
    marker = read_marker(save) or {}
    if marker.get("state") == "slimmed":
        return _from_marker(step, marker)
    if not has_hf_weights(save):
        raise ValueError(f"{save} holds no Hugging Face weights ({'/'.join(HF_PARTS)}/*.safetensors)")
    before = int(marker.get("bytes_before") or _folder_bytes(save))
    started = marker.get("started") or _now()
    write_text(save / MARKER, json.dumps({"state": "slimming", "bytes_before": before, "started": started}) + "\n")
    hf = hf_folder(save)
    for stale in hf.glob(".*.tmp"):  # a rewrite cut short by a kill (repro.atomic.write_with's temp names)
        stale.unlink(missing_ok=True)
    files = sorted(hf.glob("*.safetensors"))
    rewritten = sum(bf16_safetensors(f) for f in files)
    for index in hf.glob("*.safetensors.index.json"):
        _update_index(index)
    removed = tuple(_remove_resume_parts(save))
    after = _folder_bytes(save)
    done = Slimmed(step, before, after, rewritten, tuple(sorted({*marker.get("removed", ()), *removed})))
    record = {
        "state": "slimmed",
        "dtype": SLIM_DTYPE,
        "from_dtype": "float32",
        "bytes_before": before,
        "bytes_after": after,
        "weight_files": done.weight_files,
        "removed": list(done.removed),
        "why": why,
        "started": started,
        "finished": _now(),
    }
    write_text(save / MARKER, json.dumps(record, indent=1) + "\n")
    return done


def _from_marker(step: int, marker: dict) -> Slimmed:
    return Slimmed(
        step,
        int(marker.get("bytes_before", 0)),
        int(marker.get("bytes_after", 0)),
        int(marker.get("weight_files", 0)),
        tuple(marker.get("removed", ())),
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _folder_bytes(save: Path) -> int:
    """The save's bytes on disk, its marker file aside."""
    files = (f for f in save.rglob("*") if f.is_file() and not f.is_symlink() and f != save / MARKER)
    return sum(f.stat().st_size for f in files)


def _remove_resume_parts(save: Path) -> list[str]:
    """Delete everything in the save but actor/huggingface and the marker; returns what went."""
    removed = []
    for entry in sorted(save.iterdir()):
        if entry.name == MARKER:
            continue
        if entry.name == HF_PARTS[0] and entry.is_dir():
            for part in sorted(entry.iterdir()):
                if part.name != HF_PARTS[1]:
                    _remove(part)
                    removed.append(f"{entry.name}/{part.name}")
            continue
        _remove(entry)
        removed.append(entry.name)
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


# ---- safetensors, tensor by tensor ---------------------------------------------------------------------


def read_header(path: Path) -> tuple[dict, int]:
    """A safetensors file's header (name -> dtype, shape, data_offsets; and __metadata__) and the offset of
    its data: 8 bytes of little-endian header length, then the JSON header (safetensors' format)."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > _HEADER_LIMIT:
            raise ValueError(f"{path}: a {length}-byte safetensors header is not a safetensors file")
        return json.loads(handle.read(length)), 8 + length


def data_bytes(path: Path) -> int:
    """Bytes of tensor data in a safetensors file (what a sharded model's index calls total_size)."""
    header, _ = read_header(path)
    return sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")


def bf16_safetensors(path: Path) -> int:
    """Rewrite `path` with its float32 tensors cast to bfloat16 (torch's round-to-nearest-even cast), every
    other tensor copied as it is; 1 when the file was rewritten, 0 when it held no float32 tensor."""
    import torch

    header, start = read_header(path)
    metadata = header.pop("__metadata__", None)
    if not any(info["dtype"] == "F32" for info in header.values()):
        return 0
    names = sorted(header, key=lambda name: header[name]["data_offsets"][0])
    new: dict = {} if metadata is None else {"__metadata__": metadata}
    offset = 0
    for name in names:
        info = header[name]
        begin, end = info["data_offsets"]
        size = (end - begin) // 2 if info["dtype"] == "F32" else end - begin
        dtype = "BF16" if info["dtype"] == "F32" else info["dtype"]
        new[name] = {"dtype": dtype, "shape": info["shape"], "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(new, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned, as safetensors writes it

    def write(out: IO[bytes]) -> None:
        out.write(struct.pack("<Q", len(blob)))
        out.write(blob)
        buffer = bytearray(_CHUNK_BYTES)
        with open(path, "rb") as src:
            for name in names:
                begin, end = header[name]["data_offsets"]
                src.seek(start + begin)
                left = end - begin
                while left:
                    n = min(left, _CHUNK_BYTES)
                    view = memoryview(buffer)[:n]
                    if src.readinto(view) != n:
                        raise ValueError(f"{path} is shorter than its header says (tensor {name})")
                    if header[name]["dtype"] == "F32":
                        chunk = torch.frombuffer(buffer, dtype=torch.float32, count=n // 4)
                        out.write(chunk.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
                    else:
                        out.write(view)
                    view.release()
                    left -= n

    write_with(path, write)
    return 1


def _update_index(index: Path) -> None:
    """A sharded model's index: the same weight map, total_size of the rewritten shards."""
    data = json.loads(index.read_text())
    shards = sorted(set(data.get("weight_map", {}).values()))
    if not shards or not all((index.parent / s).is_file() for s in shards):
        return
    data.setdefault("metadata", {})["total_size"] = sum(data_bytes(index.parent / s) for s in shards)
    write_text(index, json.dumps(data, indent=2, sort_keys=True) + "\n")
