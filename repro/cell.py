"""One cell of the grid, resolved once from the names a user typed: the catalog records it trains with.

A cell travels from the command line (or a sweep file) to the CPU trainer, verl's config builder, the preflight
and the launchers as this one frozen object. Each of those reads the records it holds and looks no name up in
the catalog again, so two paths can no longer disagree about the same cell (the released preset's sampler, the
async variant, a `--model-path` build), and a new method or backbone is threaded through one function,
`resolve_cell`. Every value carries where it came from (`provenance`): the command line, a sweep file, or the
catalog default it fell back to.

A run folder's config.yaml records the cell's names (the CPU trainer's `backbone`, `method`, `prompt_set`,
`seed`; verl's `cell`, `preset`, and `backbone` + `model_path` for a `--model-path` cell), and
`ResolvedCell.from_config` rebuilds the cell from it (`repro eval RUN_DIR` reads a run's backbone so). The
form is the one run folders had before this module existed, so they read the same way and resume unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from repro import catalog
from repro.catalog import Backbone, Method, PromptSet, PromptTemplate, ReleasedScript, Setting
from repro.errors import ReproError
from repro.prompting import template_for
from repro.sampling import SamplerSpec

ENGINES = ("local", "verl")  # CPU backbones: the CPU trainer, or verl's real trainer; GPU backbones: verl only
PRESETS = ("paper", "released")
RELEASED_EST = "est-released"  # the method whose sampler `--preset released` gives every Est cell
DEFAULT = "catalog default"  # the provenance of a value nobody typed
MATCHED_SUFFIX = "__matched"  # a compute-matched long run's folder: its reference run's name and this
_CELL_RE = re.compile(r"(?P<backbone>.+?)__(?P<method>.+?)__(?P<prompt_set>.+?)__s(?P<seed>\d+)")


def cell_name(backbone: str, method: str, prompt_set: str, seed: int) -> str:
    """The folder name of one grid cell; `collect` parses it back, so the separator is a double underscore."""
    return f"{backbone}__{method}__{prompt_set}__s{seed}"


def parse_cell(name: str) -> dict[str, Any] | None:
    """``<backbone>__<method>__<prompt_set>__s<seed>`` -> its four keys, or None when `name` is not one."""
    match = _CELL_RE.fullmatch(name)
    if match is None:
        return None
    return {
        "backbone": match["backbone"],
        "method": match["method"],
        "prompt_set": match["prompt_set"],
        "seed": int(match["seed"]),
    }


def model_path_label(model: str, model_path: str) -> str:
    """The backbone field of a cell that trains `model_path` with `model`'s settings: `MODEL+NAME`, NAME the
    folder's (or Hub id's) last part, so its run folder, rows and figures never pass for the catalog model's."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(str(model_path).rstrip("/")).name).replace("__", "-").strip("-.")
    if not name:
        raise ReproError(f"--model-path {model_path!r} names no folder or Hub model")
    return f"{model}+{name}"


@dataclass(frozen=True)
class Extension:
    """A long run of a finished cell to a generation budget (`repro run --extend REF --until-tokens N`): the
    budget, the token counts whose checkpoints it keeps, and a cap on its steps."""

    until_tokens: int
    keep_tokens: tuple[int, ...]
    steps: int

    def args(self, reference: Path) -> list[str]:
        """`repro run` options after the cell's own."""
        keep = "[" + ",".join(str(t) for t in self.keep_tokens) + "]"
        out = ["--extend", str(reference), "--until-tokens", str(self.until_tokens), "--steps", str(self.steps)]
        return [*out, "--set", f"keep_tokens={keep}", "--set", f"save_freq={self.steps}"]


@dataclass(frozen=True)
class ResolvedCell:
    """A grid cell as it trains: the backbone, method, prompt set and template records, the sampler the
    preset gives the method, the released script and async schedule that apply to it, the hyperparameters
    at the preset's values and the backbone's verl resources, each value with its source. Built by
    `resolve_cell` (or `from_config`), never by hand."""

    backbone: Backbone
    method: Method
    prompt_set: PromptSet
    seed: int
    preset: str
    engine: str
    template: PromptTemplate
    sampler: SamplerSpec  # what the method samples with under this preset and engine
    released: ReleasedScript | None  # the released script of the method's kind (None: none was released)
    schedule: Mapping[str, Setting]  # verl's async schedule for a METHOD-async verl cell, else empty
    hyperparameters: Mapping[str, Setting]  # the shared hyperparameters at this cell's values
    scaled: Mapping[str, Setting]  # a CPU backbone's scaling of the paper's values (cpu_scaling.yaml), else empty
    resources: Mapping[str, Setting]  # verl's resources of the backbone (gpu_resources.yaml or cpu_resources.yaml)
    device_overrides: Mapping[str, Setting]  # a CPU rehearsal's full-path verl overrides, else empty
    model_path: str | None = None  # `--model-path`: the user's weights trained with the backbone's settings
    label: str = ""  # the backbone field of its run folder and rows: the key, or `MODEL+NAME` for `--model-path`
    extension: Extension | None = None  # a compute-matched long run of this cell (repro.sweep_matched)
    provenance: Mapping[str, str] = field(default_factory=dict, compare=False)  # name -> where its value came from

    def __hash__(self) -> int:
        return hash((self.name, self.preset, self.engine, self.model_path))

    @property
    def is_cpu(self) -> bool:
        return self.backbone.device == "cpu"

    @property
    def name(self) -> str:
        return self.reference_name + (MATCHED_SUFFIX if self.extension is not None else "")

    @property
    def reference_name(self) -> str:
        """The cell's own run folder: the one a compute-matched long run of it starts from."""
        return cell_name(self.label, self.method.key, self.prompt_set.key, self.seed)

    def hp(self, name: str) -> Any:
        """One hyperparameter's value for this cell."""
        return self.hyperparameters[name].value

    def released_settings(self) -> dict[str, Setting]:
        """The verl overrides the released preset takes from the method's released script: empty on a CPU
        backbone (its rehearsal keeps the CPU scaling), under the paper preset, or for a kind without one."""
        if self.is_cpu or self.preset != "released" or self.released is None:
            return {}
        return self.released.applied(self.backbone)

    def names(self) -> dict[str, Any]:
        """The names the cell is resolved from, as `resolve_cell` takes them."""
        return {
            "model": self.backbone.key,
            "method": self.method.key,
            "prompt_set": self.prompt_set.key,
            "seed": self.seed,
            "preset": self.preset,
            "engine": self.engine,
            "model_path": self.model_path,
        }

    def describe(self) -> list[str]:
        """One line per resolved name with where it came from (the dry run's account of the cell)."""
        return [f"{key}={value}  <- {self.provenance.get(key, DEFAULT)}" for key, value in self.names().items()]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ResolvedCell:
        """The cell a run folder's config.yaml was written for: the CPU trainer's form (backbone, method,
        prompt_set, seed) or verl's (`cell` name, `preset`, `backbone` + `model_path` for the user's weights)."""
        origin = "the run folder's config.yaml"
        if "cell" not in config:  # the CPU trainer's
            return resolve_cell(
                str(config["backbone"]), str(config["method"]), str(config["prompt_set"]), int(config["seed"]),
                engine="local", origin=origin,
            )  # fmt: skip
        parsed = parse_cell(str(config["cell"]))
        if parsed is None:
            raise ReproError(f"cell name {config['cell']!r} is not BACKBONE__METHOD__PROMPT_SET__sSEED")
        model, method, prompt_set, seed = parsed["backbone"], parsed["method"], parsed["prompt_set"], parsed["seed"]
        label, model_path = model, config.get("model_path") or None
        if model_path:
            model = str(config.get("backbone") or model.split("+", 1)[0])
        preset = str(config.get("preset", "paper"))
        cell = resolve_cell(
            model, method, prompt_set, seed, preset=preset, engine="verl", model_path=model_path, origin=origin
        )
        # the label the run was named with: the recorded weights may be the Hub cache's copy of what was typed
        return replace(cell, label=label)


def _hyperparameters(backbone: Backbone, preset: str) -> dict[str, Setting]:
    """Every shared hyperparameter at the cell's value with that value's source: a CPU backbone's scaling
    (cpu_scaling.yaml) over the paper's value, or the released scripts' value under `released`."""
    scaling = catalog.cpu_scaling(backbone.key) if backbone.device == "cpu" else {}
    out = {}
    for name, setting in catalog.hyperparameters().items():
        if name in scaling:
            out[name] = scaling[name]
        elif backbone.device != "cpu" and preset == "released" and setting.released is not None:
            out[name] = Setting(setting.released, f"{setting.source} (released value)")
        else:
            out[name] = setting
    return out | {name: setting for name, setting in scaling.items() if name not in out}


def _sampler(method: Method, seed: int, preset: str, engine: str) -> SamplerSpec:
    """The method's sampler under the preset. verl cells under `released` sample as the released code did:
    Seq with its released downsampling, Est as the released ray_trainer_ema.py (est-released's sampler); the
    CPU trainer keeps the catalog's sampler whatever the preset (the preset is a verl cell's)."""
    spec = method.sampler_spec(seed=seed)
    if engine != "verl" or preset != "released":
        return spec
    if spec.kind == "seq":
        return spec.with_(downsample=method.sampler["downsample"].released or "first")
    if spec.kind == "est":
        return catalog.get_method(RELEASED_EST).sampler_spec(seed=seed)
    return spec


def resolve_cell(
    model: str,
    method: str,
    prompt_set: str | None = None,
    seed: int = 0,
    *,
    preset: str = "paper",
    engine: str | None = None,
    asynchronous: bool = False,
    model_path: str | None = None,
    origin: str = "command line",
    given: Collection[str] | None = None,
) -> ResolvedCell:
    """The cell the names stand for, or one ReproError line naming the bad name and the fix. `prompt_set` and
    `engine` default to the backbone's (its prompt set; local on a CPU backbone, verl on a GPU one);
    `asynchronous` is `--async` (the same as METHOD-async); `origin` is where the given names came from, and
    `given` which of seed and preset were given there (None: all, as a sweep file's or a config's are)."""
    backbone = catalog.get_backbone(model)
    entry = catalog.get_method(method)
    if asynchronous and not entry.asynchronous:
        entry = catalog.get_method(catalog.async_method(method))
    prompts = catalog.get_prompt_set(prompt_set or backbone.prompt_set)
    if preset not in PRESETS:
        raise ReproError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    chosen_engine = engine or ("local" if backbone.device == "cpu" else "verl")
    if chosen_engine not in ENGINES:
        raise ReproError(f"unknown engine {chosen_engine!r}; valid engines: {', '.join(ENGINES)}")
    if chosen_engine == "local" and backbone.device != "cpu":
        raise ReproError(f"{model} trains with verl on GPUs; drop --engine local (it is for tiny-arith)")
    if model_path is not None and chosen_engine == "local":
        raise ReproError(
            "--model-path trains through verl's trainer; add --engine verl (the CPU trainer keeps its own models)"
        )
    if backbone.device == "cpu":
        resources, device_overrides = catalog.cpu_resources(backbone.key) if chosen_engine == "verl" else ({}, {})
    else:
        resources, device_overrides = catalog.gpu_resources(backbone.key), {}
    provenance = {
        "model": origin,
        "method": f"{origin} (--async)" if asynchronous and entry.key != method else origin,
        "prompt_set": origin if prompt_set else f"{DEFAULT} (the backbone's, catalog/backbones.yaml)",
        "seed": origin if given is None or "seed" in given else f"{DEFAULT} (seed 0)",
        "preset": origin if given is None or "preset" in given else f"{DEFAULT} (the paper's values)",
        "engine": origin
        if engine
        else f"{DEFAULT} ({'local' if backbone.device == 'cpu' else 'verl'} for a {backbone.device} backbone)",
        "model_path": origin if model_path else f"{DEFAULT} (the backbone's own weights)",
    }
    return ResolvedCell(
        backbone=backbone,
        method=entry,
        prompt_set=prompts,
        seed=int(seed),
        preset=preset,
        engine=chosen_engine,
        template=template_for(backbone),
        sampler=_sampler(entry, int(seed), preset, chosen_engine),
        released=catalog.released_script(entry.kind),
        schedule=catalog.async_schedule() if entry.asynchronous and chosen_engine == "verl" else {},
        hyperparameters=_hyperparameters(backbone, preset),
        scaled=catalog.cpu_scaling(backbone.key) if backbone.device == "cpu" else {},
        resources=resources,
        device_overrides=device_overrides,
        model_path=model_path,
        label=model_path_label(backbone.key, model_path) if model_path else backbone.key,
        provenance=provenance,
    )
