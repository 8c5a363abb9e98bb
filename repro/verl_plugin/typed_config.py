"""A composed verl config checked against verl's own typed config classes, key by key, before any node starts.

Hydra's composition rejects an unknown key (without `+`) but not a wrong type: `--set
actor_rollout_ref.rollout.n=abc` composes, passes `validate_config`, and fails hours later on a GPU node
when a worker computes with it. verl types its sections with dataclasses named by each node's `_target_`
(`RolloutConfig`, `FSDPActorConfig`, ...); merging a node into `OmegaConf.structured(<that class>)` is
OmegaConf's own validation of types and keys. Each key is merged on its own, so one bad key is named
exactly and a quirk of one field (some verl dataclasses do not round-trip through `structured`) does not
hide the others; `config_errors(cfg, baseline)` reports only what the baseline (the same cell without
the user's `--set`) does not already show. Sections verl keeps as plain dicts (`trainer`, `data`) are
checked against the type of verl's default value. The plugin's own section, `algorithm.reinforce_ada`,
is checked against `SamplerSpec`, the dataclass the rollout manager builds from it.
"""

from __future__ import annotations

import functools
from dataclasses import is_dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

PLUGIN_SECTIONS = {"algorithm.reinforce_ada": "repro.sampling.spec.SamplerSpec"}


@functools.cache
def _structured(target: str):
    """OmegaConf's structured schema of a dataclass named by a `_target_`, or None when it has none."""
    from hydra.utils import get_class

    try:
        cls = get_class(target)
    except Exception:
        return None
    if not is_dataclass(cls):
        return None
    try:
        return OmegaConf.structured(cls)
    except Exception:
        return None


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    for marker in (" full_key:", " object_type="):  # OmegaConf appends its own location; ours is clearer
        text = text.split(marker)[0]
    return text


def _check_typed(node: DictConfig, schema, path: str, out: dict[str, str]) -> None:
    for key in node:
        if key == "_target_":
            continue
        full = f"{path}.{key}" if path else str(key)
        value = node._get_node(key)
        if isinstance(value, DictConfig) and ("_target_" in value or full in PLUGIN_SECTIONS):
            _walk(value, full, out)
            continue
        if key not in set(schema.keys()):  # `in schema` is False for a key whose default is MISSING
            out[full] = f"{full} is not a key of {_name(schema)}"
            continue
        try:
            OmegaConf.merge(schema, {key: value})
        except Exception as exc:
            out[full] = f"{full}: {_one_line(exc)}"


def _name(schema) -> str:
    kind = OmegaConf.get_type(schema)
    return kind.__name__ if kind is not None else "config"


def _walk(node: Any, path: str, out: dict[str, str], defaults: Any = None) -> None:
    if not isinstance(node, DictConfig):
        return
    target = PLUGIN_SECTIONS.get(path) or (node.get("_target_") if "_target_" in node else None)
    schema = _structured(str(target)) if target else None
    if schema is not None:
        _check_typed(node, schema, path, out)
        return
    if path in PLUGIN_SECTIONS:  # SamplerSpec's Literal fields are beyond OmegaConf: its fields' defaults decide
        _check_fields(node, str(target), path, out)
        return
    for key in node:
        full = f"{path}.{key}" if path else str(key)
        child = node._get_node(key)
        default = defaults._get_node(key) if isinstance(defaults, DictConfig) and key in defaults else None
        if isinstance(child, DictConfig):
            _walk(child, full, out, default)
        elif not isinstance(child, ListConfig):
            _check_plain(full, node[key], default, out)


def _check_plain(path: str, value: Any, default: Any, out: dict[str, str]) -> None:
    """A key of an untyped section: a number or bool where verl's default is one."""
    if default is None or isinstance(default, DictConfig | ListConfig):
        return
    expected = default._value() if hasattr(default, "_value") else default
    if expected is None or isinstance(expected, str) or not isinstance(value, str):
        return
    kind = "a boolean" if isinstance(expected, bool) else "an integer" if isinstance(expected, int) else "a number"
    out[path] = f"{path}: {value!r} is not {kind} (the default is {expected!r})"


def _check_fields(node: DictConfig, target: str, path: str, out: dict[str, str]) -> None:
    from dataclasses import MISSING, fields

    from hydra.utils import get_class

    known = {f.name: f.default for f in fields(get_class(target))}
    for key in node:
        full = f"{path}.{key}"
        if key not in known:
            out[full] = f"{full} is not a field of {target.rsplit('.', 1)[-1]} (known: {', '.join(sorted(known))})"
        elif known[key] is not MISSING:
            _check_plain(full, node[key], known[key], out)


def config_errors(cfg: DictConfig, baseline: DictConfig | None = None) -> list[str]:
    """One line per key of `cfg` that verl's typed config classes refuse, less those `baseline` has too."""
    defaults = _verl_defaults()
    found: dict[str, str] = {}
    _walk(cfg, "", found, defaults)
    if baseline is not None:
        known: dict[str, str] = {}
        _walk(baseline, "", known, defaults)
        found = {k: v for k, v in found.items() if known.get(k) != v}
    return [found[k] for k in sorted(found)]


@functools.cache
def _verl_defaults() -> DictConfig:
    from repro.verl_plugin.config_builder import compose

    return compose([])
