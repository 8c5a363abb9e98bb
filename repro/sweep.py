"""Sweep files: a grid of cells (backbone x method x prompt set x seed) described as data."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from repro import catalog
from repro.errors import ReproError
from repro.launch.slurm_options import SlurmOptions
from repro.loggers import ALWAYS, parse_loggers

_KEYS = {"name", "description", "backbones", "methods", "prompt_sets", "seeds", "preset", "engine", "overrides"}
_KEYS |= {"slurm", "ray", "logger"}
ENGINES = ("local", "verl")  # CPU backbones: the CPU trainer, or verl's real trainer (GPU backbones: always verl)
_RAY_KEYS = {"address", "python"}
PRESETS = ("paper", "released")


@dataclass(frozen=True)
class Cell:
    backbone: str
    method: str
    prompt_set: str
    seed: int


@dataclass(frozen=True)
class Sweep:
    name: str
    description: str
    backbones: tuple[str, ...]
    methods: tuple[str, ...]
    prompt_sets: tuple[str, ...]
    seeds: tuple[int, ...]
    preset: str = "paper"
    engine: str = "local"
    overrides: dict[str, Any] = field(default_factory=dict)
    loggers: tuple[str, ...] = ALWAYS  # `logger:` (a list or a comma string), as `repro run --logger` takes it
    slurm: dict[str, Any] = field(default_factory=dict)  # sbatch defaults (repro.launch.slurm_options.SlurmOptions)
    ray: dict[str, Any] = field(default_factory=dict)  # Jobs API defaults: address, python

    def cells(self) -> list[Cell]:
        return [Cell(*combo) for combo in itertools.product(self.backbones, self.methods, self.prompt_sets, self.seeds)]


def load_sweep(path: str | Path) -> Sweep:
    """Parse and validate a sweep file; every problem is one ReproError line naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ReproError(f"sweep file {path} does not exist; see sweeps/ for examples")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise ReproError(f"{path}: malformed YAML{line}; fix the file (see sweeps/paper.yaml)") from exc
    if not isinstance(data, dict):
        raise ReproError(f"{path}: expected a mapping with keys {sorted(_KEYS)}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ReproError(f"{path}: unknown keys {unknown}; valid keys: {sorted(_KEYS)}")

    def names(key: str, valid: dict) -> tuple[str, ...]:
        raw = data.get(key)
        if not isinstance(raw, list) or not raw:
            raise ReproError(f"{path}: '{key}' must be a non-empty list")
        for item in raw:
            if item not in valid:
                raise ReproError(
                    f"{path}: unknown {key[:-1].replace('_', ' ')} {item!r}; valid: {', '.join(sorted(valid))}"
                )
        return tuple(raw)

    seeds = data.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise ReproError(f"{path}: 'seeds' must be a non-empty list of non-negative integers")
    preset = data.get("preset", "paper")
    if preset not in PRESETS:
        raise ReproError(f"{path}: preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    engine = data.get("engine", "local")
    if engine not in ENGINES:
        raise ReproError(f"{path}: engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    overrides = data.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise ReproError(f"{path}: 'overrides' must be a mapping of dotted verl keys to values")
    logger = data.get("logger")
    if logger is not None and not isinstance(logger, str | list):
        raise ReproError(
            f"{path}: 'logger' must be a list or a comma string (e.g. logger: [console, file, tensorboard])"
        )
    loggers = parse_loggers(logger, where=str(path))
    slurm = data.get("slurm") or {}
    ray = data.get("ray") or {}
    if not isinstance(slurm, dict) or not isinstance(ray, dict):
        raise ReproError(f"{path}: 'slurm' and 'ray' must be mappings (e.g. slurm: {{account: my-acct}})")
    SlurmOptions.from_mapping(slurm, str(path))  # reject a bad option now, not at submission
    if set(ray) - _RAY_KEYS:
        raise ReproError(f"{path}: unknown ray options {sorted(set(ray) - _RAY_KEYS)}; valid: {sorted(_RAY_KEYS)}")
    return Sweep(
        name=str(data.get("name") or path.stem),
        description=str(data.get("description") or ""),
        backbones=names("backbones", catalog.backbones()),
        methods=names("methods", catalog.methods()),
        prompt_sets=names("prompt_sets", catalog.prompt_sets()),
        seeds=tuple(seeds),
        preset=preset,
        engine=engine,
        overrides=dict(overrides),
        loggers=loggers,
        slurm=dict(slurm),
        ray=dict(ray),
    )
