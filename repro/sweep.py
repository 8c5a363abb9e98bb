"""Sweep files: a grid of cells (backbone x method x prompt set x seed) described as data."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from repro import catalog
from repro.cell import ResolvedCell, resolve_cell
from repro.errors import ReproError
from repro.launch.deadline import TimeLimit
from repro.launch.slurm_options import SlurmOptions
from repro.loggers import ALWAYS, parse_loggers
from repro.sweep_matched import MatchedPair, parse_pairs

_KEYS = {"name", "description", "backbones", "methods", "prompt_sets", "seeds", "preset", "engine", "overrides"}
_KEYS |= {"slurm", "ray", "logger", "eval", "matched"}
ENGINES = ("local", "verl")  # CPU backbones: the CPU trainer, or verl's real trainer (GPU backbones: always verl)
_RAY_KEYS = {"address", "python", "time", "signal_margin", "max_allocations"}  # the last three: a limit per job
PRESETS = ("paper", "released")


CHECKPOINT_CHOICES = ("final", "all")
_EVAL_KEYS = {"benchmarks", "k", "checkpoints", "grading", "max_new_tokens", "shards", "time"}


@dataclass(frozen=True)
class EvalSpec:
    """The evaluation stage a sweep asks for (`eval:`): `repro eval RUN` with these options, run for each cell
    once its training has finished. The defaults are the paper's protocol: Ave@32 on the four benchmarks (the
    tiny tiers for tiny-arith), every kept checkpoint, graded as the released eval grades."""

    benchmarks: str = "all"
    k: int = 32
    checkpoints: str = "all"  # final | all | a comma list of steps
    grading: str = "released"
    max_new_tokens: int | None = None  # default: repro eval's (4096; the tiny model's own cap)
    shards: int | None = None  # processes per evaluation (default: one per GPU of the cell's node; 1 on CPU)
    time: str = "12:00:00"  # slurm: --time of the evaluation job

    def eval_args(self) -> list[str]:
        """`repro eval` options after the run folder (the same for every launcher)."""
        out = ["--benchmarks", self.benchmarks, "--k", str(self.k), "--checkpoints", self.checkpoints]
        out += ["--grading", self.grading]
        if self.max_new_tokens is not None:
            out += ["--max-new-tokens", str(self.max_new_tokens)]
        if self.shards is not None:
            out += ["--shards", str(self.shards)]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _eval_spec(raw: Any, path: Path) -> EvalSpec | None:
    """`eval:` of a sweep file: absent or false = no evaluation stage, true or {} = the paper's protocol."""
    if raw is None or raw is False:
        return None
    if raw is True:
        raw = {}
    if not isinstance(raw, dict):
        raise ReproError(f"{path}: 'eval' must be a mapping (e.g. eval: {{k: 32, checkpoints: all}}) or true/false")
    unknown = sorted(set(raw) - _EVAL_KEYS)
    if unknown:
        raise ReproError(f"{path}: unknown eval options {unknown}; valid: {sorted(_EVAL_KEYS)}")
    values = dict(raw)
    for key in ("k", "max_new_tokens", "shards"):
        value = values.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ReproError(f"{path}: eval.{key} must be a positive integer, got {value!r}")
    checkpoints = values.get("checkpoints", "all")
    if isinstance(checkpoints, list):
        if not checkpoints or not all(isinstance(s, int) and s > 0 for s in checkpoints):
            raise ReproError(f"{path}: eval.checkpoints must be final, all or a list of positive steps")
        checkpoints = ",".join(str(s) for s in checkpoints)
    elif checkpoints not in CHECKPOINT_CHOICES:
        raise ReproError(f"{path}: eval.checkpoints must be final, all or a list of steps, got {checkpoints!r}")
    values["checkpoints"] = checkpoints
    grading = values.get("grading", "released")
    if grading not in ("released", "math-verify"):
        raise ReproError(f"{path}: eval.grading must be released or math-verify, got {grading!r}")
    benchmarks = values.get("benchmarks", "all")
    if isinstance(benchmarks, list):
        benchmarks = ",".join(str(b) for b in benchmarks)
    values["benchmarks"] = str(benchmarks)
    values["time"] = str(values.get("time", "12:00:00"))
    SlurmOptions(time=values["time"]).check(f"{path}: eval")
    return EvalSpec(**values)


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
    ray: dict[str, Any] = field(default_factory=dict)  # Jobs API defaults: address, python; a time limit per job
    eval: EvalSpec | None = None  # the evaluation stage (`eval:`), None when the sweep only trains
    matched: tuple[MatchedPair, ...] = ()  # `matched:`: the cells are the pairs' compute-matched long runs

    def cells(self, runs_root: str | Path | None = None) -> list[ResolvedCell]:
        """Every cell of the grid, resolved once here (the sweep file is what the user typed): a CPU backbone
        on the sweep's engine, a GPU backbone on verl. A `matched:` sweep's cells are the long runs whose
        reference runs under `runs_root` have finished (`repro.sweep_matched`)."""
        if self.matched:
            return self.matched_cells(runs_root)[0]
        return self.grid()

    def matched_cells(self, runs_root: str | Path | None) -> tuple[list[ResolvedCell], list[str]]:
        """(the long runs ready to train, a line for each one still waiting for its reference runs)."""
        from repro.sweep_matched import matched_cells

        if runs_root is None:
            raise ReproError(f"sweep {self.name}: its matched cells are read from the reference runs; give --runs-root")
        return matched_cells(self.matched, self.grid(), Path(runs_root))

    def grid(self) -> list[ResolvedCell]:
        """The backbones x methods x prompt sets x seeds (a `matched:` sweep's: the runs its long runs extend)."""
        return [
            resolve_cell(
                backbone,
                method,
                prompt_set,
                seed,
                preset=self.preset,
                engine=self.engine if catalog.get_backbone(backbone).device == "cpu" else None,
                origin=f"sweep {self.name}",
            )
            for backbone, method, prompt_set, seed in itertools.product(
                self.backbones, self.methods, self.prompt_sets, self.seeds
            )
        ]


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
            if item not in valid and not (key == "methods" and isinstance(item, str) and catalog.is_method(item)):
                raise ReproError(
                    f"{path}: unknown {key[:-1].replace('_', ' ')} {item!r}; valid: {', '.join(sorted(valid))}"
                )
        return tuple(raw)

    for key in names("backbones", catalog.backbones()):
        if catalog.get_backbone(key).weights_from_user:
            raise ReproError(
                f"{path}: {key} has no weights of its own, and a sweep trains catalog backbones; train your model "
                f"with repro run --model {key} --model-path DIR_OR_HUB_ID --train-file PARQUET"
            )
    seeds = data.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise ReproError(f"{path}: 'seeds' must be a non-empty list of non-negative integers")
    preset = data.get("preset", "paper")
    if preset not in PRESETS:
        raise ReproError(f"{path}: preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    engine = data.get("engine", "local")
    if engine not in ENGINES:
        raise ReproError(f"{path}: engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    matched = parse_pairs(data["matched"], str(path)) if "matched" in data else ()
    if matched:  # the grid the long runs extend: the pairs' methods and prompt sets
        data.setdefault("methods", list(dict.fromkeys(m for p in matched for m in p.sides)))
        data.setdefault("prompt_sets", list(dict.fromkeys(p.prompt_set for p in matched)))
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
    TimeLimit.from_values(ray, f"{path}: ray")  # a bad time limit now, not at submission
    if matched and (engine == "verl" or any(catalog.get_backbone(b).device != "cpu" for b in data["backbones"])):
        raise ReproError(
            f"{path}: matched long runs start from a finished run's checkpoint, which only the CPU trainer does for "
            "now; on verl, train the baseline to the other's tokens: repro run --engine verl --until-tokens N "
            "(`repro simulate cost` gives the GRPO-n4 steps of each method's tokens)"
        )
    for pair in matched:
        for method in pair.sides:
            if method not in data["methods"] or pair.prompt_set not in data["prompt_sets"]:
                raise ReproError(
                    f"{path}: matched pair {pair.method} vs {pair.reference} ({pair.prompt_set}) is outside the "
                    "grid of 'methods' x 'prompt_sets'; leave those keys out (the pairs give them) or add it"
                )
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
        eval=_eval_spec(data.get("eval"), path),
        matched=matched,
    )
