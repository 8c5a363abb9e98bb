"""One arithmetic for the CPU miniature on any x86 CPU: the kernel choices pinned before torch or numpy loads.

The same torch wheel computes different bits on different CPUs (ATen's AVX512 kernels, MKL's dispatch,
numpy's SIMD ufuncs, the thread count), and the tiny model's training is chaotic in those bits: the committed
results of an Intel Xeon did not come out on an AMD EPYC, two verdicts included (issue 35). The pin
(catalog/cpu_arithmetic.yaml) makes every machine compute what an AVX2 machine with one thread computes.

Only environment variables can choose these kernels, and torch, MKL and numpy read them once, when they load:
`pin()` runs first thing in `repro.cli` (and the test suite's conftest), and every process `repro` starts
inherits the variables, except verl's trainer, which gets the user's own environment back (`released`): the
pin would only slow a GPU cell, and vLLM's CPU kernels pick their ISA from the hardware, so a CPU rehearsal's
rollouts cannot be pinned.

One kernel no variable pins: torch's float32 sqrt under AVX2 refines the CPU's approximate reciprocal square
root, whose bits differ by vendor. The project computes the one it trains with itself (repro.local.adamw), and
the fingerprint records it (`replaced`).

stdlib and PyYAML only: this module must load before anything that imports numpy.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

SAVED_ENV = "REPRO_ARITHMETIC_SAVED"  # the user's own values of the pinned variables, for GPU children
WARNED_ENV = "REPRO_ARITHMETIC_WARNED"  # the opt-out's line is printed once per process tree


@cache
def _spec() -> dict[str, Any]:
    # read as a file beside this module: importing the repro.catalog package would load numpy before the pin
    text = (Path(__file__).parent / "catalog" / "cpu_arithmetic.yaml").read_text()
    data = yaml.safe_load(text)
    return {
        "env": {name: str(entry["value"]) for name, entry in data["env"].items()},
        "threads": int(data["threads"]),
        "replaced": {name: str(entry["value"]) for name, entry in data["replaced"].items()},
        "opt_out_env": str(data["opt_out_env"]),
    }


def pinned_env() -> dict[str, str]:
    return dict(_spec()["env"])


def opt_out_env() -> str:
    return _spec()["opt_out_env"]


def native(environ: dict[str, str] | None = None) -> bool:
    """True when the user asked each library to pick its own kernels (the opt-out variable is set to 1)."""
    environ = os.environ if environ is None else environ
    return environ.get(opt_out_env(), "").strip() not in ("", "0")


def pin() -> list[str]:
    """Set the pinned variables in this process's environment; returns the libraries that loaded too early for
    the pin to reach them (empty in every `repro` process). Under the opt-out, says once that results will
    not be comparable and changes nothing."""
    if native():
        if not os.environ.get(WARNED_ENV):
            os.environ[WARNED_ENV] = "1"
            print(
                f"repro: {opt_out_env()}=1: torch, MKL and numpy pick this CPU's own kernels and threads; results "
                "will not be comparable with the committed ones or with another machine's",
                file=sys.stderr,
            )
        return []
    env = pinned_env()
    if SAVED_ENV not in os.environ:  # the first repro process of the tree: keep the user's values
        os.environ[SAVED_ENV] = json.dumps({name: os.environ.get(name) for name in env})
    os.environ.update(env)
    return [name for name in ("torch", "numpy") if name in sys.modules]


def released(environ: dict[str, str]) -> dict[str, str]:
    """`environ` with the pin undone (the user's own values back): the environment of a GPU cell's processes."""
    if native(environ) or SAVED_ENV not in environ:
        return dict(environ)
    out = dict(environ)
    for name, value in json.loads(environ[SAVED_ENV]).items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    out.pop(SAVED_ENV, None)
    return out


def threads(requested: int) -> int:
    """torch's thread count for a computing process: the pinned one, or `requested` under the opt-out."""
    return requested if native() else _spec()["threads"]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def fingerprint() -> dict[str, Any]:
    """What decides a CPU run's bits, machine-independent: a CPU run's config records it, so a run resumed
    under another arithmetic is refused like any other change of config."""
    versions = {"torch": _version("torch"), "numpy": _version("numpy")}
    replaced = {"replaced": dict(_spec()["replaced"])}  # the project's own kernels, pinned or not
    if native():
        return {"pinned": False, **versions, **replaced}
    return {"pinned": True, **versions, **pinned_env(), **replaced}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def in_force() -> dict[str, Any]:
    """What this process actually computes with (imports torch): an attempt's record, the report's header."""
    import torch

    return {
        "cpu": cpu_model(),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "pinned": not native(),
    }


def describe(record: dict[str, Any] | None = None) -> str:
    """One line for a report's header."""
    record = fingerprint() if record is None else record
    if not record.get("pinned"):
        return f"torch {record.get('torch')}, numpy {record.get('numpy')}, each library's own kernels (not pinned)"
    return (
        f"torch {record.get('torch')}, numpy {record.get('numpy')}, pinned: ATen {record.get('ATEN_CPU_CAPABILITY')}, "
        f"MKL_CBWR={record.get('MKL_CBWR')}, oneDNN {record.get('ONEDNN_MAX_CPU_ISA')}, numpy without AVX512, "
        f"{record.get('OMP_NUM_THREADS')} thread a process"
        + (", AdamW's square root in float64" if record.get("replaced", {}).get("adamw_sqrt") == "float64" else "")
    )
