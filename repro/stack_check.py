"""One stack check for a GPU cell, wherever the cell will run: at submission and at the start of every job.

A cell that dies at actor start on its node costs a queue wait and a day of someone's attention; the same
fault is visible in seconds on the login node (what is installed) or on the node before Ray starts (what
the node's driver and GPUs are). So one list of checks runs in two places:

* at submission (`repro sweep run`, `repro run` of a GPU cell, their dry runs), of the environment the jobs
  will use, on a host that may have no GPU: the installed versions against the tested stack, the
  attention package the cell asks for, the NVIDIA driver where NVML exists (a login node usually has
  none, and then the node checks it), the disk for the checkpoints;
* at the start of every job, on each of its nodes, before Ray or verl start (`python -m repro.node_check
  RUN_DIR`, a line of the job script): the same, plus the driver (required there) and CUDA as torch sees
  it. A failure is one line naming the problem and the fix, and exit code 2.

The driver check is the one a typical cluster trips on: PyPI's torch 2.11.0 is a CUDA 13 build, which needs
a driver of the 580 family; on a 535-570 node torch sees no GPU while Ray still schedules GPU workers.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from repro.launch.attention import ATTENTION_KEY, FALLBACK_ATTENTION, VERL_DEFAULT_ATTENTION
from repro.sizes import size_text

VERDICTS = ("ok", "warn", "fail", "skip")
NVML_LIBRARY = "libnvidia-ml.so.1"  # what the driver installs; nvidia-smi reads the same library


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str  # one of VERDICTS
    detail: str  # what was found; for warn and fail, also the fix

    def line(self) -> str:
        return f"{self.verdict.upper():<4} {self.name:<9} {self.detail}"


def failures(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.verdict == "fail"]


# ---- the driver -----------------------------------------------------------------------------------------


def nvml_driver_version(library: str = NVML_LIBRARY) -> str | None:
    """The NVIDIA driver's version through NVML (the driver's own library, which needs no CUDA and no
    GPU-enabled torch), or None where there is no driver: a login node, a CPU machine."""
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:  # NVML_SUCCESS is 0; a library without a loaded kernel module fails here
        return None
    try:
        buffer = ctypes.create_string_buffer(96)
        if nvml.nvmlSystemGetDriverVersion(buffer, ctypes.c_uint(len(buffer))) != 0:
            return None
        return buffer.value.decode() or None
    finally:
        nvml.nvmlShutdown()


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def driver_needed(torch_cuda: str) -> tuple[str, str] | None:
    """(the oldest driver that runs torch's CUDA runtime, its source), from the catalog; None for a CUDA
    major the catalog does not list."""
    from repro import catalog

    setting = catalog.gpu_node().cuda_drivers.get(torch_cuda.split(".")[0])
    return None if setting is None else (str(setting.value), setting.source)


def driver_check(found: str | None, torch_cuda: str | None, torch_version: str, *, on_node: bool) -> Check:
    """The verdict on a driver `found` (None: no NVML) for a torch built for CUDA `torch_cuda` (None: a CPU
    build). Below what torch needs is a failure naming both versions and the two ways out."""
    if torch_cuda is None:
        return Check("driver", "skip", f"torch {torch_version} is a CPU build: no CUDA runtime to match a driver to")
    needed = driver_needed(torch_cuda)
    if needed is None:
        return Check("driver", "warn", f"no driver table entry for CUDA {torch_cuda} (repro/catalog/gpu_node.yaml)")
    want, _source = needed
    if found is None:
        if on_node:
            return Check(
                "driver",
                "fail",
                f"no NVIDIA driver on this node ({NVML_LIBRARY} not found or NVML did not start); "
                f"torch {torch_version} (CUDA {torch_cuda}) needs driver >= {want}: run the job on a GPU "
                "partition, or ask the admins why the driver is missing",
            )
        return Check(
            "driver",
            "skip",
            f"no NVIDIA driver on this host (a login node?); each job checks its node's at start (torch "
            f"{torch_version} needs >= {want} for CUDA {torch_cuda})",
        )
    if _version_tuple(found) < _version_tuple(want):
        major = torch_cuda.split(".")[0]
        return Check(
            "driver",
            "fail",
            f"NVIDIA driver {found} found, torch {torch_version} is built for CUDA {torch_cuda}, which needs driver "
            f">= {want}. Either install a newer driver (>= {want}) or NVIDIA's CUDA forward-compatibility package "
            f"(cuda-compat-{major}-*, data-center GPUs, its lib folder first on LD_LIBRARY_PATH), or install a "
            f"torch built for the CUDA this driver runs (and a vLLM built against that torch)",
        )
    return Check(
        "driver", "ok", f"NVIDIA driver {found} >= {want}, which CUDA {torch_cuda} (torch {torch_version}) needs"
    )


# ---- the packages, the attention, CUDA, the disk --------------------------------------------------------------


def version_checks() -> list[Check]:
    """vLLM, torch and transformers against the tested GPU stack (repro/catalog/gpu_constraints.txt)."""
    from repro.gpu_stack import stack_problems, tested_versions

    problems = stack_problems(cuda=True, attn_implementation=FALLBACK_ATTENTION)
    if problems:
        return [Check("stack", "fail", line) for line in problems]
    pins = tested_versions()
    shown = ", ".join(f"{name} {pins[name]}" for name in ("vllm", "torch", "transformers"))
    return [Check("stack", "ok", f"{shown}: the stack verl 0.9.1 was tested with")]


def attention_check(asked: str, required: bool) -> Check:
    """Whether the attention the actor loads with imports here. Unless the user asked for it explicitly
    (`--require-flash-attn`, or a --set of the key), a missing flash-attn is not a failure: the cell runs
    with sdpa (`attention_fallback`), which is slower and gives the same result."""
    from repro.gpu_stack import ATTENTION_PACKAGES, flash_attn_hint, importable, installed_version, tested_versions

    if asked not in ATTENTION_PACKAGES:
        return Check("attention", "ok", f"{asked}: torch's own, nothing to install")
    module, dist = ATTENTION_PACKAGES[asked]
    if importable(module):
        return Check("attention", "ok", f"{asked}: {dist} {installed_version(dist)} imports")
    have = installed_version(dist)
    state = f"{dist} {have} is installed but does not import" if have else f"{dist} is not installed"
    pins = tested_versions()
    hint = flash_attn_hint(pins.get(dist, "2.8.3"), pins["torch"]) if dist == "flash-attn" else f"install {dist}"
    if required:
        return Check("attention", "fail", f"{asked} was asked for explicitly and {state}: {hint}")
    return Check(
        "attention",
        "warn",
        f"{state}: the cells run with {FALLBACK_ATTENTION} (slower, same result; their logs, status.json and "
        f"`repro status` say so); pass --require-flash-attn to stop instead. To get it: {hint}",
    )


def cuda_check(gpus_per_node: int) -> Check:
    """CUDA as torch sees it on this node: available, and at least the GPUs the cell asks per node."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not torch.cuda.is_available():
        why = (
            f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
            if visible is not None and not visible.strip(" ,")
            else "see the driver line above"
            if torch.version.cuda
            else f"torch {torch.__version__} is a CPU build: run `bash scripts/setup-venv.sh gpu`"
        )
        return Check("cuda", "fail", f"torch sees no CUDA device on this node ({why})")
    count = torch.cuda.device_count()
    if count < gpus_per_node:
        return Check(
            "cuda",
            "fail",
            f"torch sees {count} CUDA device(s), the cell needs {gpus_per_node} per node: ask Slurm for them "
            "(--gpus-per-node) or lower trainer.n_gpus_per_node with --set",
        )
    name = torch.cuda.get_device_name(0)
    return Check("cuda", "ok", f"{count} x {name} (CUDA {torch.version.cuda}), the cell uses {gpus_per_node} per node")


def disk_check(folder: Path, one_save: int, whole_run: int) -> Check:
    """Free space where the checkpoints go. Less than one save fails (the first save would); less than the
    whole run warns (the run fills it over days; free space, or keep fewer saves)."""
    here = Path(folder)
    while not here.exists() and here != here.parent:
        here = here.parent
    free = shutil.disk_usage(here).free
    if free < one_save:
        return Check(
            "disk",
            "fail",
            f"{size_text(free)} free under {here}, one checkpoint needs {size_text(one_save)}: put the runs on a "
            "larger file system (--runs-root) or free space",
        )
    if free < whole_run:
        return Check(
            "disk",
            "warn",
            f"{size_text(free)} free under {here}, the run's checkpoints grow to {size_text(whole_run)}: it will stop "
            "with a full disk unless space is freed before then",
        )
    return Check(
        "disk",
        "ok",
        f"{size_text(free)} free under {here}; the run's checkpoints need {size_text(whole_run)} at most",
    )


# ---- the two places --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CellNeeds:
    """What a cell asks of a node, read from its verl overrides and the catalog."""

    attention: str = VERL_DEFAULT_ATTENTION
    attention_required: bool = False
    gpus_per_node: int = 8
    checkpoints: str = "checkpoints"  # where the saves go
    one_save: int = 0  # bytes
    whole_run: int = 0  # bytes


def run_checks(needs: CellNeeds, *, on_node: bool) -> list[Check]:
    """Every check for a cell, in the order they bite: the packages, the attention, the driver, CUDA (on the
    node only: a login node has no GPU to see), the disk."""
    import torch

    checks = [*version_checks(), attention_check(needs.attention, needs.attention_required)]
    checks.append(driver_check(nvml_driver_version(), torch.version.cuda, torch.__version__, on_node=on_node))
    if on_node:
        checks.append(cuda_check(needs.gpus_per_node))
    if needs.one_save:
        checks.append(disk_check(Path(needs.checkpoints), needs.one_save, needs.whole_run))
    else:
        checks.append(
            Check("disk", "skip", "no checkpoint size known yet (the run's config.yaml is written at submission)")
        )
    return checks


def submission_checks(needs: CellNeeds, python: str | os.PathLike[str] | None = None) -> list[Check]:
    """The checks at submission, of the environment the jobs will use: this interpreter's in-process, another
    one's (a scheduler's `python_bin`) by running this module there."""
    if python is None or Path(python).resolve() == Path(sys.executable).resolve():
        return run_checks(needs, on_node=False)
    args = [str(python), "-m", "repro.node_check", "--submission", "--json", "--needs", json.dumps(asdict(needs))]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    try:
        return [Check(**c) for c in json.loads(proc.stdout)]
    except (ValueError, TypeError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return [
            Check(
                "stack", "fail", f"{python} could not run the stack check ({tail[0][:200]}): is repro installed there?"
            )
        ]


def require_flash_attn(overrides: dict[str, Any], backbones: Sequence[str]) -> dict[str, Any]:
    """`--require-flash-attn`: the cells' attention set explicitly, which makes a node without flash-attn a
    failure (see `attention_asked`). A CPU backbone runs sdpa by design, and a --set of the key wins."""
    from repro import catalog
    from repro.errors import ReproError

    cpu = [b for b in backbones if catalog.get_backbone(b).device == "cpu"]
    if cpu:
        raise ReproError(f"--require-flash-attn is for GPU cells; {', '.join(cpu)} runs on a CPU with sdpa: drop it")
    if any(str(key).lstrip("+") == ATTENTION_KEY for key in overrides):
        return dict(overrides)
    return {f"+{ATTENTION_KEY}": VERL_DEFAULT_ATTENTION, **overrides}
