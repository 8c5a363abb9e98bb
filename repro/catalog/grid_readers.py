"""Reading the grid's files: backbones, methods, prompt sets and templates, benchmarks, released checkpoints.

Everything that knows these files' layout lives here, so the accessors stay a short list of what the catalog
offers. Each file is read and checked once per process (the loaders are cached), and a file that names another
file's entries (a backbone's methods, a checkpoint's backbone) is checked against that file's records.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from repro.catalog.reading import _mapping, _only, _read, _setting, _settings, _settings_at, _text
from repro.catalog.records import (
    _SPEC_FIELDS,
    Backbone,
    Benchmark,
    CatalogError,
    Checkpoint,
    Method,
    PromptSet,
    PromptTemplate,
    Setting,
    Settings,
    _sampler_value_problem,
)
from repro.errors import ReproError, unknown_name

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


# The parsers take already-loaded YAML, so tests can feed them broken data directly.


def _described(
    entries: Mapping[str, Any],
    filename: str,
    required: tuple[str, ...],
    allowed: tuple[str, ...] | None = None,
    text: str = "description",
) -> Iterator[tuple[str, str, str, Settings]]:
    """(key, where, text, settings) of each entry in file order: most grid files hold entries of one text
    (`text`) and settings, and an entry is checked before the next is read, so the first bad one is named."""
    for key, raw in entries.items():
        where = f"{filename}: {key}"
        entry = dict(_mapping(raw, where))
        described = _text(entry.pop(text, None), f"{where}.{text}")
        yield key, where, described, _settings(entry, where, required=required, allowed=allowed)


def _parse_backbones(
    data: Mapping[str, Any],
    filename: str,
    method_keys: set[str],
    prompt_set_keys: set[str],
    template_keys: set[str] | None = None,
) -> dict[str, Backbone]:
    out: dict[str, Backbone] = {}
    for key, where, description, settings in _described(
        data,
        filename,
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
    ):
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
    for key, where, description, settings in _described(
        data, filename, required=_CHECKPOINT_FIELDS, allowed=_CHECKPOINT_FIELDS
    ):
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
    for key, where, description, settings in _described(
        data, filename, required=("system", "user_suffix"), allowed=("system", "user_suffix", "examples")
    ):
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
    common = _settings_at(data.get("common"), f"{filename}: common")
    out: dict[str, PromptSet] = {}
    sets = _mapping(data.get("prompt_sets"), f"{filename}: prompt_sets")
    for key, where, description, own in _described(sets, filename, required=("pass_rate",)):
        rate = own["pass_rate"].value
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1:
            raise CatalogError(f"{where}.pass_rate: must be a number in (0, 1], got {rate!r}")
        out[key] = PromptSet(key, description, MappingProxyType({**common, **own}))
    return out, common


def _parse_benchmarks(data: Mapping[str, Any], filename: str) -> tuple[dict[str, Benchmark], Setting]:
    _only(data, filename, ("weighted_average", "benchmarks"))
    weighting = _setting(data.get("weighted_average"), f"{filename}: weighted_average")
    out: dict[str, Benchmark] = {}
    entries = _mapping(data.get("benchmarks"), f"{filename}: benchmarks")
    for key, where, contents, settings in _described(entries, filename, required=("problems",), text="contents"):
        problems = settings["problems"].value
        if isinstance(problems, bool) or not isinstance(problems, int) or problems < 1:
            raise CatalogError(f"{where}.problems: must be a positive integer, got {problems!r}")
        out[key] = Benchmark(key, contents, settings)
    return out, weighting
