"""Backbones, methods, prompt sets, benchmarks and shared hyperparameters, as data.

The numbers live in the YAML files next to this module, each with the source it was taken from, so a
reader can check a value against the paper without reading code, and a change of value is a one-line
data edit. The package only loads and validates them (grid_readers.py and run_readers.py, into the types of
records.py; this module hands them out): a malformed file fails on first use with one line naming the file
and entry, never later inside a run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from repro.catalog.grid_readers import _backbones, _benchmarks, _checkpoints, _methods, _prompt_sets, _prompt_templates
from repro.catalog.records import (
    Backbone,
    Benchmark,
    CatalogError,
    Checkpoint,
    GpuNode,
    Method,
    PromptSet,
    PromptTemplate,
    ReleasedScript,
    Setting,
)
from repro.catalog.records import Settings as Settings
from repro.catalog.run_readers import (
    _async_schedule,
    _cpu_resources,
    _cpu_scaling,
    _gpu_node,
    _gpu_resources,
    _hyperparameters,
    _released_scripts,
    _vllm_engine,
)
from repro.errors import ReproError, unknown_name

__all__ = [
    "Backbone",
    "Benchmark",
    "CatalogError",
    "Checkpoint",
    "GpuNode",
    "Method",
    "PromptSet",
    "PromptTemplate",
    "ReleasedScript",
    "Setting",
    "backbones",
    "benchmark_weighting",
    "benchmarks",
    "checkpoints",
    "get_backbone",
    "get_benchmark",
    "get_checkpoint",
    "get_method",
    "get_prompt_set",
    "gpu_node",
    "hyperparameters",
    "methods",
    "prompt_sets",
    "prompt_template",
    "prompt_templates",
    "released_script",
    "released_scripts",
    "vllm_engine",
]

# ---------------------------------------------------------------------------------------- public API


def backbones() -> dict[str, Backbone]:
    """Every backbone by key (a fresh dict, so callers cannot alter the cached catalog)."""
    return dict(_backbones())


def methods() -> dict[str, Method]:
    """Every method by key, paper methods first, in file order."""
    return dict(_methods())


def prompt_sets() -> dict[str, PromptSet]:
    """Every training prompt set by key."""
    return dict(_prompt_sets()[0])


def benchmarks() -> dict[str, Benchmark]:
    """Every evaluation benchmark by key."""
    return dict(_benchmarks()[0])


def checkpoints() -> dict[str, Checkpoint]:
    """Every released trained checkpoint by key."""
    return dict(_checkpoints())


def get_checkpoint(name: str) -> Checkpoint:
    """A released checkpoint by its key or its Hub id."""
    table = _checkpoints()
    by_hub_id = {c.hf_id: c for c in table.values()}
    if name in by_hub_id:
        return by_hub_id[name]
    return _get(table, "released checkpoint", name)


def benchmark_weighting() -> Setting:
    """How the weighted average combines benchmarks (by number of problems), with its source."""
    return _benchmarks()[1]


def hyperparameters() -> dict[str, Setting]:
    """The hyperparameters shared by every method, by name."""
    return dict(_hyperparameters())


def gpu_resources(backbone: str) -> dict[str, Setting]:
    """verl resources of a GPU backbone (paths relative to actor_rollout_ref, plus nnodes/n_gpus_per_node)."""
    table = _gpu_resources()
    if backbone not in table:
        raise unknown_name("GPU backbone", backbone, table)
    return dict(table[backbone])


def cpu_resources(backbone: str) -> tuple[dict[str, Setting], dict[str, Setting]]:
    """verl settings of a CPU backbone's rehearsal: (resources keyed as in gpu_resources.yaml, full-path
    overrides applied on top of the cell's override list)."""
    table = _cpu_resources()
    if backbone not in table:
        raise unknown_name("CPU backbone", backbone, table)
    resources, overrides = table[backbone]
    return dict(resources), dict(overrides)


def gpu_node() -> GpuNode:
    """The driver table, the write speed and the per-backbone step times behind the stack check and the
    Slurm stop margin (gpu_node.yaml)."""
    return _gpu_node()


def vllm_engine(device: str) -> dict[str, Setting]:
    """The vllm.LLM arguments repro's own engines start with on `device` (cpu: PyPI's CPU build; gpu), each
    with its reason (vllm_engine.yaml): the dtype is data, so the CPU engine computes in the transformers
    backend's fp32 while a GPU keeps vLLM's bf16."""
    table = _vllm_engine()
    if device not in table:
        raise unknown_name("vLLM device", device, table)
    return dict(table[device])


def cpu_scaling(backbone: str) -> dict[str, Setting]:
    """The paper's training settings a CPU backbone's rehearsal changes, with the reasons (cpu_scaling.yaml)."""
    table = _cpu_scaling()
    if backbone not in table:
        raise unknown_name("CPU backbone", backbone, table)
    return dict(table[backbone])


def prompt_templates() -> dict[str, PromptTemplate]:
    """Every chat prompt template by key."""
    return dict(_prompt_templates())


def prompt_template(name: str) -> PromptTemplate:
    return _get(_prompt_templates(), "prompt template", name)


def get_backbone(name: str) -> Backbone:
    return _get(_backbones(), "backbone", name)


ASYNC_SUFFIX = "-async"


def get_method(name: str) -> Method:
    """A catalog method, or METHOD-async for any catalog METHOD: the same sampler with the next step's sampling
    overlapped with this step's update (one step stale, importance-corrected; `repro run --async`)."""
    table = _methods()
    if name not in table and name.endswith(ASYNC_SUFFIX) and name[: -len(ASYNC_SUFFIX)] in table:
        base = table[name[: -len(ASYNC_SUFFIX)]]
        return dataclasses.replace(
            base,
            key=name,
            summary=f"{base.key} with the next step's sampling overlapped with this step's update (one step "
            "stale, importance-corrected as verl's async trainers do): beyond the paper. " + base.summary,
            paper=False,
            base=base.key,
        )
    if name not in table:
        raise ReproError(f"{unknown_name('method', name, table)}; each also as METHOD-async") from None
    return table[name]


def is_method(name: str) -> bool:
    """A name get_method accepts: a catalog key or its -async variant."""
    table = _methods()
    return name in table or (name.endswith(ASYNC_SUFFIX) and name[: -len(ASYNC_SUFFIX)] in table)


def async_method(name: str) -> str:
    """The -async variant of a method key (itself when it already is one)."""
    return name if get_method(name).asynchronous else name + ASYNC_SUFFIX


def get_prompt_set(name: str) -> PromptSet:
    return _get(_prompt_sets()[0], "prompt set", name)


def get_benchmark(name: str) -> Benchmark:
    return _get(_benchmarks()[0], "benchmark", name)


def _get(table: Mapping[str, Any], kind: str, name: str) -> Any:
    try:
        return table[name]
    except KeyError:
        raise unknown_name(kind, name, table) from None


def async_schedule() -> dict[str, Setting]:
    """The verl settings of a METHOD-async cell, each with its reason (async_schedule.yaml)."""
    return dict(_async_schedule())


# ------------------------------------------------------------------------------------ released preset


def released_scripts() -> dict[str, ReleasedScript]:
    """Every released script of the `released` preset, by key (released_preset.yaml)."""
    return dict(_released_scripts())


def released_script(kind: str) -> ReleasedScript | None:
    """The released script that trained method kind `kind`; None when none was released (dapo)."""
    return next((s for s in _released_scripts().values() if kind in s.kinds), None)
