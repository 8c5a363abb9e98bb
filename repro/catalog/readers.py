"""Reading the YAML files next to the package and validating them into records.

Everything that knows the files' layout lives here, so the accessors stay a short list of what the
catalog offers, and a malformed file fails on first use with one line naming the file and entry. Each
file is read and checked once per process (the loaders are cached), and a file that names another
file's entries (a backbone's methods, a checkpoint's backbone) is checked against that file's records.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml

from repro.catalog.records import (
    _SPEC_FIELDS,
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
    Settings,
    _sampler_value_problem,
)
from repro.errors import ReproError, unknown_name

# ------------------------------------------------------------------------------------------- loading

_BACKBONE_FIELDS = (
    "hf_id",
    "params",
    "context_length",
    "device",
    "gated",
    "prompt_set",
    "paper_prompt_sets",
    "paper_methods",
    "prompt_template",
)
_BUILD_FIELDS = ("wheel", "sha256", "member", "dtype", "special_tokens")


def _check_build(setting: Setting | None, where: str) -> None:
    if setting is None:
        return
    value = setting.value
    if not isinstance(value, Mapping) or sorted(value) != sorted(_BUILD_FIELDS):
        raise CatalogError(f"{where}.build: must map exactly {', '.join(_BUILD_FIELDS)}")
    if not re.fullmatch(r"[0-9a-f]{64}", str(value["sha256"])):
        raise CatalogError(f"{where}.build.sha256: must be 64 hex digits")
    tokens = value["special_tokens"]
    if not isinstance(tokens, Mapping) or not {"eos", "pad"} <= set(tokens) or not set(tokens) <= {"bos", "eos", "pad"}:
        raise CatalogError(f"{where}.build.special_tokens: must give eos and pad (and may give bos)")
    if value["dtype"] not in ("float32", "bfloat16", "float16"):
        raise CatalogError(f"{where}.build.dtype: must be float32, bfloat16 or float16")


def _read(filename: str) -> dict[str, Any]:
    text = resources.files("repro.catalog").joinpath(filename).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{filename}: not valid YAML: {' '.join(str(exc).split())}") from None
    return _mapping(data, filename)


@functools.cache
def _backbones() -> Mapping[str, Backbone]:
    return MappingProxyType(
        _parse_backbones(
            _read("backbones.yaml"),
            "backbones.yaml",
            set(_methods()),
            set(_prompt_sets()[0]),
            set(_prompt_templates()),
        )
    )


@functools.cache
def _prompt_templates() -> Mapping[str, PromptTemplate]:
    return MappingProxyType(_parse_prompt_templates(_read("prompt_templates.yaml"), "prompt_templates.yaml"))


@functools.cache
def _methods() -> Mapping[str, Method]:
    return MappingProxyType(_parse_methods(_read("methods.yaml"), "methods.yaml"))


@functools.cache
def _prompt_sets() -> tuple[Mapping[str, PromptSet], Settings]:
    sets, common = _parse_prompt_sets(_read("prompt_sets.yaml"), "prompt_sets.yaml")
    return MappingProxyType(sets), common


@functools.cache
def _benchmarks() -> tuple[Mapping[str, Benchmark], Setting]:
    table, weighting = _parse_benchmarks(_read("benchmarks.yaml"), "benchmarks.yaml")
    return MappingProxyType(table), weighting


@functools.cache
def _checkpoints() -> Mapping[str, Checkpoint]:
    from repro import paper

    table1 = paper.table1()
    rows = {tuple(row) for row in table1[list(_TABLE1_KEYS)].itertuples(index=False)}
    return MappingProxyType(
        _parse_checkpoints(
            _read("checkpoints.yaml"),
            "checkpoints.yaml",
            set(_backbones()),
            set(_methods()),
            set(_prompt_sets()[0]),
            rows,
        )
    )


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


@functools.cache
def _gpu_resources() -> Mapping[str, Settings]:
    filename = "gpu_resources.yaml"
    data = _read(filename)
    gpu = {k for k, b in _backbones().items() if b.device == "gpu"}
    if set(data) != gpu:
        raise CatalogError(f"{filename}: must list exactly the GPU backbones {sorted(gpu)}, got {sorted(data)}")
    return MappingProxyType(
        {k: _settings(_mapping(v, f"{filename}: {k}"), f"{filename}: {k}") for k, v in data.items()}
    )


@functools.cache
def _cpu_resources() -> Mapping[str, tuple[Settings, Settings]]:
    filename = "cpu_resources.yaml"
    data = _read(filename)
    cpu = {k for k, b in _backbones().items() if b.device == "cpu"}
    if set(data) != cpu:
        raise CatalogError(f"{filename}: must list exactly the CPU backbones {sorted(cpu)}, got {sorted(data)}")
    out = {}
    for name, entry in data.items():
        where = f"{filename}: {name}"
        entry = _mapping(entry, where)
        if set(entry) != {"resources", "overrides"}:
            raise CatalogError(f"{where}: needs exactly 'resources' and 'overrides', got {sorted(entry)}")
        gpu_keys = set(next(iter(_gpu_resources().values())))
        resources = _settings(_mapping(entry["resources"], f"{where}.resources"), f"{where}.resources")
        if set(resources) != gpu_keys:
            raise CatalogError(f"{where}.resources: must have the keys of gpu_resources.yaml {sorted(gpu_keys)}")
        out[name] = (resources, _settings(_mapping(entry["overrides"], f"{where}.overrides"), f"{where}.overrides"))
    return MappingProxyType(out)


@functools.cache
def _gpu_node() -> GpuNode:
    filename = "gpu_node.yaml"
    data = _read(filename)
    keys = {"cuda_drivers", "write_mb_per_s", "signal_slack_s", "barrier_factor", "step_s"}
    if set(data) != keys:
        raise CatalogError(f"{filename}: must hold exactly {sorted(keys)}, got {sorted(data)}")
    drivers = _settings(_mapping(data["cuda_drivers"], f"{filename}: cuda_drivers"), f"{filename}: cuda_drivers")
    for major, setting in drivers.items():
        if not str(major).isdigit() or not re.fullmatch(r"\d+(\.\d+)*", str(setting.value)):
            raise CatalogError(f"{filename}: cuda_drivers.{major}: a CUDA major and a dotted driver version")
    steps = _settings(_mapping(data["step_s"], f"{filename}: step_s"), f"{filename}: step_s")
    gpu = {k for k, b in _backbones().items() if b.device == "gpu"}
    if set(steps) != gpu:
        raise CatalogError(f"{filename}: step_s must list exactly the GPU backbones {sorted(gpu)}, got {sorted(steps)}")
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
    filename = "cpu_scaling.yaml"
    data = _read(filename)
    cpu = {k for k, b in _backbones().items() if b.device == "cpu"}
    if set(data) != cpu:
        raise CatalogError(f"{filename}: must list exactly the CPU backbones {sorted(cpu)}, got {sorted(data)}")
    return MappingProxyType(
        {name: _settings(_mapping(entry, f"{filename}: {name}"), f"{filename}: {name}") for name, entry in data.items()}
    )


# The parsers take already-loaded YAML, so tests can feed them broken data directly.


def _parse_backbones(
    data: Mapping[str, Any],
    filename: str,
    method_keys: set[str],
    prompt_set_keys: set[str],
    template_keys: set[str] | None = None,
) -> dict[str, Backbone]:
    out: dict[str, Backbone] = {}
    for key, raw in data.items():
        where = f"{filename}: {key}"
        entry = dict(_mapping(raw, where))
        description = _text(entry.pop("description", None), f"{where}.description")
        settings = _settings(
            entry,
            where,
            required=_BACKBONE_FIELDS,
            allowed=(
                *_BACKBONE_FIELDS,
                "param_count",
                "released_prompt_sets",
                "train_prompts_from",
                "eval_tensor_parallel_size",
                "build",
                "task",
                "eval_max_new_tokens",
            ),
        )
        _check_build(settings.get("build"), where)
        tp = settings["eval_tensor_parallel_size"].value if "eval_tensor_parallel_size" in settings else 1
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise CatalogError(f"{where}.eval_tensor_parallel_size: must be a positive integer, got {tp!r}")
        if settings["device"].value not in ("gpu", "cpu"):
            raise CatalogError(f"{where}.device: must be gpu or cpu, got {settings['device'].value!r}")
        for name, valid in (("prompt_set", prompt_set_keys), ("paper_prompt_sets", prompt_set_keys)):
            values = settings[name].value
            for value in values if isinstance(values, list) else [values]:
                if value not in valid:
                    raise CatalogError(f"{where}.{name}: {unknown_name('prompt set', str(value), valid)}")
        released_sets = settings["released_prompt_sets"].value if "released_prompt_sets" in settings else {}
        if not isinstance(released_sets, Mapping) or any(k not in prompt_set_keys for k in released_sets):
            raise CatalogError(
                f"{where}.released_prompt_sets: must map prompt sets {sorted(prompt_set_keys)} to Hub ids"
            )
        template = settings["prompt_template"].value
        if template_keys is not None and template not in template_keys:
            raise CatalogError(
                f"{where}.prompt_template: {unknown_name('prompt template', str(template), template_keys)}"
            )
        paper_methods = settings["paper_methods"].value
        if not isinstance(paper_methods, list):
            raise CatalogError(f"{where}.paper_methods: must be a list of method keys")
        for value in paper_methods:
            if value not in method_keys:
                raise CatalogError(f"{where}.paper_methods: {unknown_name('method', str(value), method_keys)}")
        out[key] = Backbone(key=key, description=description, settings=settings)
    for key, backbone in out.items():
        source = backbone.settings.get("train_prompts_from")
        for value in () if source is None else (source.value, source.released):
            if value is not None and value not in out:
                raise CatalogError(f"{filename}: {key}.train_prompts_from: {unknown_name('backbone', str(value), out)}")
    return out


_CHECKPOINT_FIELDS = ("hf_id", "backbone", "method", "prompt_set", "table1_row")
_TABLE1_KEYS = ("backbone", "prompt_set", "method")


def _parse_checkpoints(
    data: Mapping[str, Any],
    filename: str,
    backbone_keys: set[str],
    method_keys: set[str],
    prompt_set_keys: set[str],
    table1_rows: set[tuple[str, str, str]],
) -> dict[str, Checkpoint]:
    """Released checkpoints; every name they use must exist, so `repro eval KEY` never fails half way."""
    out: dict[str, Checkpoint] = {}
    for key, raw in data.items():
        where = f"{filename}: {key}"
        entry = dict(_mapping(raw, where))
        description = _text(entry.pop("description", None), f"{where}.description")
        settings = _settings(entry, where, required=_CHECKPOINT_FIELDS, allowed=_CHECKPOINT_FIELDS)
        for name, kind, valid in (
            ("backbone", "backbone", backbone_keys),
            ("method", "method", method_keys),
            ("prompt_set", "prompt set", prompt_set_keys),
        ):
            if settings[name].value not in valid:
                raise CatalogError(f"{where}.{name}: {unknown_name(kind, str(settings[name].value), valid)}")
        if not isinstance(settings["hf_id"].value, str) or "/" not in settings["hf_id"].value:
            raise CatalogError(f"{where}.hf_id: must be a Hub id owner/name, got {settings['hf_id'].value!r}")
        row = settings["table1_row"].value
        if not isinstance(row, Mapping) or set(row) != set(_TABLE1_KEYS):
            raise CatalogError(f"{where}.table1_row: must map exactly {', '.join(_TABLE1_KEYS)}")
        if tuple(row[k] for k in _TABLE1_KEYS) not in table1_rows:
            label = "/".join(str(row[k]) for k in _TABLE1_KEYS)
            raise CatalogError(f"{where}.table1_row: {label} is not a row of paper_tables/table1_per_benchmark.csv")
        out[key] = Checkpoint(key=key, description=description, settings=settings)
    hub_ids = [c.hf_id for c in out.values()]
    if len(set(hub_ids)) != len(hub_ids):
        raise CatalogError(f"{filename}: two checkpoints share a Hub id")
    return out


def _parse_methods(data: Mapping[str, Any], filename: str) -> dict[str, Method]:
    out: dict[str, Method] = {}
    for key, raw in data.items():
        where = f"{filename}: {key}"
        entry = _mapping(raw, where)
        extra = sorted(set(entry) - {"summary", "paper", "released", "literature", "source", "sampler"})
        if extra:
            raise CatalogError(
                f"{where}: unknown fields {extra}; allowed: literature, paper, released, sampler, source, summary"
            )
        if entry.get("literature") is not None and not isinstance(entry["literature"], str):
            raise CatalogError(f"{where}.literature: must be the paper the method comes from")
        if not isinstance(entry.get("paper"), bool):
            raise CatalogError(f"{where}.paper: must be true or false")
        if not isinstance(entry.get("released", False), bool):
            raise CatalogError(f"{where}.released: must be true or false")
        sampler = _settings(
            _mapping(entry.get("sampler"), f"{where}.sampler"),
            f"{where}.sampler",
            required=("kind",),
            allowed=tuple(_SPEC_FIELDS),
        )
        for name, setting in sampler.items():
            problem = _sampler_value_problem(name, setting.value)
            if problem:
                raise CatalogError(f"{where}.sampler: {problem}")
        method = Method(
            key=key,
            summary=_text(entry.get("summary"), f"{where}.summary"),
            paper=entry["paper"],
            source=_text(entry.get("source"), f"{where}.source"),
            sampler=sampler,
            released=entry.get("released", False),
            literature=entry.get("literature"),
        )
        try:
            method.sampler_spec()
        except ReproError as exc:
            raise CatalogError(f"{filename}: {exc}") from None
        out[key] = method
    return out


def _parse_prompt_templates(data: Mapping[str, Any], filename: str) -> dict[str, PromptTemplate]:
    out: dict[str, PromptTemplate] = {}
    for key, raw in data.items():
        where = f"{filename}: {key}"
        entry = dict(_mapping(raw, where))
        description = _text(entry.pop("description", None), f"{where}.description")
        settings = _settings(
            entry, where, required=("system", "user_suffix"), allowed=("system", "user_suffix", "examples")
        )
        for name in ("system", "user_suffix"):
            if not isinstance(settings[name].value, str):
                raise CatalogError(f"{where}.{name}: must be text (empty text for none)")
        if "examples" in settings:
            pairs = settings["examples"].value
            if not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(t, str) and t for t in p) for p in pairs
            ):
                raise CatalogError(f"{where}.examples: must be a list of [user, assistant] text pairs")
        out[key] = PromptTemplate(key, description, settings)
    return out


def _parse_prompt_sets(data: Mapping[str, Any], filename: str) -> tuple[dict[str, PromptSet], Settings]:
    _only(data, filename, ("common", "prompt_sets"))
    common = _settings(_mapping(data.get("common"), f"{filename}: common"), f"{filename}: common")
    out: dict[str, PromptSet] = {}
    for key, raw in _mapping(data.get("prompt_sets"), f"{filename}: prompt_sets").items():
        where = f"{filename}: {key}"
        entry = dict(_mapping(raw, where))
        description = _text(entry.pop("description", None), f"{where}.description")
        own = _settings(entry, where, required=("pass_rate",))
        rate = own["pass_rate"].value
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1:
            raise CatalogError(f"{where}.pass_rate: must be a number in (0, 1], got {rate!r}")
        out[key] = PromptSet(key, description, MappingProxyType({**common, **own}))
    return out, common


def _parse_benchmarks(data: Mapping[str, Any], filename: str) -> tuple[dict[str, Benchmark], Setting]:
    _only(data, filename, ("weighted_average", "benchmarks"))
    weighting = _setting(data.get("weighted_average"), f"{filename}: weighted_average")
    out: dict[str, Benchmark] = {}
    for key, raw in _mapping(data.get("benchmarks"), f"{filename}: benchmarks").items():
        where = f"{filename}: {key}"
        entry = dict(_mapping(raw, where))
        contents = _text(entry.pop("contents", None), f"{where}.contents")
        settings = _settings(entry, where, required=("problems",))
        problems = settings["problems"].value
        if isinstance(problems, bool) or not isinstance(problems, int) or problems < 1:
            raise CatalogError(f"{where}.problems: must be a positive integer, got {problems!r}")
        out[key] = Benchmark(key, contents, settings)
    return out, weighting


# ---------------------------------------------------------------------------------------- validation


def _mapping(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping) or not raw:
        raise CatalogError(f"{where}: expected a non-empty mapping, got {type(raw).__name__}")
    return raw


def _text(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise CatalogError(f"{where}: missing or empty text")
    return raw.strip()


def _only(data: Mapping[str, Any], where: str, allowed: tuple[str, ...]) -> None:
    extra = sorted(set(data) - set(allowed))
    if extra:
        raise CatalogError(f"{where}: unknown top-level keys {extra}; allowed: {', '.join(allowed)}")


_SETTING_KEYS = {"value", "source", "released", "note"}


def _setting(raw: Any, where: str) -> Setting:
    """A {value, source[, released, note]} mapping; a fact without a source is refused."""
    if not isinstance(raw, Mapping) or "value" not in raw:
        raise CatalogError(f"{where}: expected a mapping with 'value' and 'source'")
    extra = sorted(set(raw) - _SETTING_KEYS)
    if extra:
        raise CatalogError(f"{where}: unknown keys {extra}; allowed: {', '.join(sorted(_SETTING_KEYS))}")
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise CatalogError(f"{where}: missing source")
    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise CatalogError(f"{where}.note: must be text")
    return Setting(value=raw["value"], source=source.strip(), released=raw.get("released"), note=note)


def _settings(
    raw: Mapping[str, Any], where: str, required: tuple[str, ...] = (), allowed: tuple[str, ...] | None = None
) -> Settings:
    missing = [name for name in required if name not in raw]
    if missing:
        raise CatalogError(f"{where}: missing settings {missing}")
    if allowed is not None:
        extra = sorted(set(raw) - set(allowed))
        if extra:
            raise CatalogError(f"{where}: unknown settings {extra}; allowed: {', '.join(sorted(allowed))}")
    return MappingProxyType({name: _setting(value, f"{where}.{name}") for name, value in raw.items()})


# ------------------------------------------------------------------------------------ released preset


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
            name: _settings(_mapping(entry[name], f"{where}.{name}"), f"{where}.{name}")
            for name in ("overrides", "resources", "not_passed")
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
