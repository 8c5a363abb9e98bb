"""CPU support for verl 0.9.1's real trainer: what a laptop needs to rehearse a cluster configuration.

Imported (through `VERL_USE_EXTERNAL_MODULES`, only for CPU cells) in the driver and in every Ray process,
where it registers, through verl's own extension points and nothing else:

- a `cpu` platform (`PlatformRegistry`), selected by `VERL_PLATFORM=cpu`: device name `cpu`, backend
  `gloo`, `current_device()` returning the string "cpu" (an int would mean `cuda:N` to `.to()` and to
  FSDP), no-op memory/stream calls, the host RNG as the device RNG. Its Ray resource name is `GPU`, so
  verl's resource pools count the logical GPUs Ray is started with (`ray_init.num_gpus`);
- verl's FSDP/FSDP2 engines for device `cpu` (`EngineRegistry`; verl registers them for cuda/npu only);
- the `vllm_cpu` rollout (`repro.verl_plugin.cpu_vllm`): verl's own vLLM server on vLLM's CPU build, the
  rehearsal's rollout, as a `RolloutReplica` in `RolloutReplicaRegistry` with verl's own vLLM server adapter
  in `verl.workers.rollout.base._ROLLOUT_REGISTRY` (a private dict: verl has no register function for
  adapters); the platform's `rollout_env_vars` give its engine processes the CPU engine's variables;
- the `cpu` rollout (`repro.verl_plugin.cpu_rollout`): the transformers stand-in, kept for what real vLLM
  cannot do (fault injection) and for environments without vLLM, registered the same way.

One thing has no extension point: `verl.utils.distributed.initialize_global_process_group_ray` builds the
backend string `cpu:gloo,{device}:{backend}`, which on this platform reads `cpu:gloo,cpu:gloo` and torch
rejects. `_patch_process_group` wraps it to pass plain `gloo` (the only change of verl behaviour here).
Importing the module anywhere but a CPU cell changes nothing unless `VERL_PLATFORM=cpu` is set.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import types
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from repro import vllm_cpu

logger = logging.getLogger(__name__)

PLATFORM = "cpu"
ROLLOUT = "cpu"


class _HostDevice(types.ModuleType):
    """`torch.cpu` plus what verl asks of a `torch.<device>` module: RNG state and memory counters."""

    def __init__(self) -> None:
        super().__init__("repro_cpu_device")

    def __getattr__(self, name: str) -> Any:
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name in ("get_rng_state", "set_rng_state", "manual_seed", "seed", "initial_seed"):
            return getattr(torch, name)
        if name == "manual_seed_all":
            return torch.manual_seed
        if name == "mem_get_info":
            return _host_memory
        if name.startswith(("memory_", "max_memory_", "reset_", "empty_cache", "ipc_collect")):
            return _zero
        raise AttributeError(f"the cpu platform has no {name!r}")

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "CPU"  # verl's flops table has a CPU entry

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None


def _zero(*args: Any, **kwargs: Any) -> Any:
    """Memory statistics of a device: nothing is allocated on one."""
    return 0


def _host_memory(*args: Any, **kwargs: Any) -> tuple[int, int]:
    """(free, total) bytes, as `torch.cuda.mem_get_info` reports them, of the host's memory."""
    import psutil

    memory = psutil.virtual_memory()
    return int(memory.available), int(memory.total)


HOST_DEVICE = _HostDevice()


@PlatformRegistry.register(platform=PLATFORM)
class CpuPlatform(PlatformBase):
    """verl's platform interface on the host CPU."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return HOST_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # never auto-detected: only VERL_PLATFORM=cpu selects it, so a GPU node is never taken for a CPU
        return False

    def current_device(self) -> str:  # type: ignore[override]  # see the module docstring
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # Ray assigns its logical GPU ids through this variable

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None

    def rollout_env_vars(self) -> dict[str, str]:
        # verl's vLLMReplica puts these in the server actor's Ray runtime env; vLLM's engine processes inherit them
        return vllm_cpu.engine_env()


def active() -> bool:
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM


def _patch_process_group() -> None:
    """Default the process-group backend to plain gloo on the cpu platform (see the module docstring)."""
    import verl.utils.distributed as distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "_repro_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if backend is None and active():
            backend = "gloo"
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray._repro_cpu = True  # type: ignore[attr-defined]
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray
    # modules that already bound the name with `from ... import`
    for name in ("verl.workers.engine_workers", "verl.checkpoint_engine.base"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "initialize_global_process_group_ray"):
            module.initialize_global_process_group_ray = initialize_global_process_group_ray


def _register_engines() -> None:
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    for model_type, engine in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        backends = EngineRegistry._engines.get(model_type, {})
        if all(PLATFORM in backends.get(b, {}) for b in ("fsdp", "fsdp2")):
            continue
        EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=PLATFORM)(engine)


def _register_rollout() -> None:
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    def load():
        from repro.verl_plugin.cpu_rollout import CpuReplica

        return CpuReplica

    def load_vllm():
        from repro.verl_plugin.cpu_vllm import CpuVllmReplica

        return CpuVllmReplica

    RolloutReplicaRegistry.register(ROLLOUT, load)
    base._ROLLOUT_REGISTRY[(ROLLOUT, "async")] = "repro.verl_plugin.cpu_rollout.CpuServerAdapter"
    RolloutReplicaRegistry.register(vllm_cpu.ROLLOUT, load_vllm)
    base._ROLLOUT_REGISTRY[(vllm_cpu.ROLLOUT, "async")] = "verl.workers.rollout.vllm_rollout.vllm_rollout.ServerAdapter"


def register() -> None:
    """Idempotent; a no-op off the cpu platform (the platform class itself is always registered)."""
    if not active():
        return
    _patch_process_group()
    _register_engines()
    _register_rollout()


register()
