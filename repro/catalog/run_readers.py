"""Reading what a cell runs with: shared hyperparameters, verl resources and the CPU scaling per backbone,
the GPU node, vLLM's engine arguments, the async schedule and the released preset.

Each file is read and checked once per process (the loaders are cached); a file that lists backbones is
checked against backbones.yaml, so a new backbone without its resources fails on first use, not in a run.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from repro.catalog.grid_readers import _backbones
from repro.catalog.reading import _mapping, _only, _read, _setting, _settings, _settings_at, _text
from repro.catalog.records import CatalogError, GpuNode, ReleasedScript, Setting, Settings
from repro.errors import unknown_name


@functools.cache
def _hyperparameters() -> Settings:
    filename = "hyperparameters.yaml"
    data = _read(filename)
    return MappingProxyType({name: _setting(raw, f"{filename}: {name}") for name, raw in data.items()})


@functools.cache
def _async_schedule() -> Mapping[str, Setting]:
    filename = "async_schedule.yaml"
    data = _read(filename)
    if set(data) != {"overrides"}:
        raise CatalogError(f"{filename}: must hold exactly one mapping, overrides, got {sorted(data)}")
    return MappingProxyType(dict(_settings(_mapping(data["overrides"], f"{filename}: overrides"), filename)))


def _device_backbones(device: str, listed: Iterable[str], where: str) -> None:
    """A file kept per backbone of one device must list every such backbone and no other: a backbone added
    without its entry fails on first use, not inside its first run."""
    keys = {k for k, b in _backbones().items() if b.device == device}
    if set(listed) != keys:
        raise CatalogError(
            f"{where} must list exactly the {device.upper()} backbones {sorted(keys)}, got {sorted(listed)}"
        )


def _backbone_settings(filename: str, device: str) -> Mapping[str, Settings]:
    data = _read(filename)
    _device_backbones(device, data, f"{filename}:")
    return MappingProxyType({k: _settings_at(v, f"{filename}: {k}") for k, v in data.items()})


@functools.cache
def _gpu_resources() -> Mapping[str, Settings]:
    return _backbone_settings("gpu_resources.yaml", "gpu")


@functools.cache
def _cpu_resources() -> Mapping[str, tuple[Settings, Settings]]:
    filename = "cpu_resources.yaml"
    data = _read(filename)
    _device_backbones("cpu", data, f"{filename}:")
    out = {}
    for name, entry in data.items():
        where = f"{filename}: {name}"
        entry = _mapping(entry, where)
        if set(entry) != {"resources", "overrides"}:
            raise CatalogError(f"{where}: needs exactly 'resources' and 'overrides', got {sorted(entry)}")
        gpu_keys = set(next(iter(_gpu_resources().values())))
        resources = _settings_at(entry["resources"], f"{where}.resources")
        if set(resources) != gpu_keys:
            raise CatalogError(f"{where}.resources: must have the keys of gpu_resources.yaml {sorted(gpu_keys)}")
        out[name] = (resources, _settings_at(entry["overrides"], f"{where}.overrides"))
    return MappingProxyType(out)


@functools.cache
def _gpu_node() -> GpuNode:
    filename = "gpu_node.yaml"
    data = _read(filename)
    keys = {"cuda_drivers", "write_mb_per_s", "signal_slack_s", "barrier_factor", "step_s"}
    if set(data) != keys:
        raise CatalogError(f"{filename}: must hold exactly {sorted(keys)}, got {sorted(data)}")
    drivers = _settings_at(data["cuda_drivers"], f"{filename}: cuda_drivers")
    for major, setting in drivers.items():
        if not str(major).isdigit() or not re.fullmatch(r"\d+(\.\d+)*", str(setting.value)):
            raise CatalogError(f"{filename}: cuda_drivers.{major}: a CUDA major and a dotted driver version")
    steps = _settings_at(data["step_s"], f"{filename}: step_s")
    _device_backbones("gpu", steps, f"{filename}: step_s")
    scalars = {k: _setting(data[k], f"{filename}: {k}") for k in ("write_mb_per_s", "signal_slack_s", "barrier_factor")}
    for name, setting in [*scalars.items(), *((f"step_s.{k}", v) for k, v in steps.items())]:
        if not isinstance(setting.value, int | float) or isinstance(setting.value, bool) or setting.value <= 0:
            raise CatalogError(f"{filename}: {name}: must be a positive number")
    return GpuNode(cuda_drivers=drivers, step_s=steps, **scalars)


_VLLM_ENGINE_DEVICES = ("cpu", "gpu")
_VLLM_ENGINE_ARGS = {
    "dtype": ("float32", "bfloat16", "float16", "auto"),
    "enforce_eager": (True, False),
    "enable_chunked_prefill": (True, False),
}


@functools.cache
def _vllm_engine() -> Mapping[str, Settings]:
    filename = "vllm_engine.yaml"
    data = _read(filename)
    if sorted(data) != sorted(_VLLM_ENGINE_DEVICES):
        raise CatalogError(f"{filename}: must list exactly the devices {list(_VLLM_ENGINE_DEVICES)}")
    out = {}
    for device, entry in data.items():
        where = f"{filename}: {device}"
        settings = _settings(_mapping(entry, where), where, required=("dtype",), allowed=tuple(_VLLM_ENGINE_ARGS))
        for name, setting in settings.items():
            valid = _VLLM_ENGINE_ARGS[name]
            if setting.value not in valid or type(setting.value) is not type(valid[0]):  # 1 == True: not a bool
                raise CatalogError(f"{where}.{name}: must be one of {list(valid)}")
        out[device] = settings
    return MappingProxyType(out)


@functools.cache
def _cpu_scaling() -> Mapping[str, Settings]:
    return _backbone_settings("cpu_scaling.yaml", "cpu")


_RELEASED_FIELDS = ("script", "repository", "trainer", "kinds", "backbone", "overrides", "resources", "not_passed")
_KINDS = ("uniform", "dapo", "seq", "est")


@functools.cache
def _released_scripts() -> Mapping[str, ReleasedScript]:
    filename = "released_preset.yaml"
    return MappingProxyType(_parse_released_scripts(_read(filename), filename, set(_backbones())))


def _parse_released_scripts(
    data: Mapping[str, Any], filename: str, backbone_keys: set[str]
) -> dict[str, ReleasedScript]:
    out: dict[str, ReleasedScript] = {}
    owner: dict[str, str] = {}
    for key, raw in data.items():
        where = f"{filename}: {key}"
        entry = _mapping(raw, where)
        _only(entry, where, _RELEASED_FIELDS)
        missing = [name for name in _RELEASED_FIELDS if name not in entry]
        if missing:
            raise CatalogError(f"{where}: missing fields {missing}")
        kinds = entry["kinds"]
        if not isinstance(kinds, list) or not kinds or any(k not in _KINDS for k in kinds):
            raise CatalogError(f"{where}.kinds: must be a non-empty list of {', '.join(_KINDS)}, got {kinds!r}")
        for kind in kinds:
            if kind in owner:
                raise CatalogError(f"{where}.kinds: {kind} is already taken by {owner[kind]}")
            owner[kind] = key
        if entry["backbone"] not in backbone_keys:
            raise CatalogError(f"{where}.backbone: {unknown_name('backbone', str(entry['backbone']), backbone_keys)}")
        sections = {
            name: _settings_at(entry[name], f"{where}.{name}") for name in ("overrides", "resources", "not_passed")
        }
        shared = sorted({k.lstrip("+") for k in sections["overrides"]} & {k.lstrip("+") for k in sections["resources"]})
        if shared:
            raise CatalogError(f"{where}: {shared} are in both overrides and resources")
        for name, setting in sections["not_passed"].items():
            if not setting.note:
                raise CatalogError(f"{where}.not_passed.{name}: needs a note saying why verl does not get it")
        for name, setting in sections["overrides"].items():
            if setting.value is None:
                raise CatalogError(f"{where}.overrides.{name}: null is only for resources (it removes a key)")
        out[key] = ReleasedScript(
            key=key,
            script=_text(entry["script"], f"{where}.script"),
            repository=_text(entry["repository"], f"{where}.repository"),
            trainer=_text(entry["trainer"], f"{where}.trainer"),
            kinds=tuple(kinds),
            backbone=entry["backbone"],
            **sections,
        )
    return out
