"""Reading one YAML file next to the package, and the checks every catalog entry shares.

Every catalog file is a mapping of entries made of {value, source} settings, so the readers of each file
(grid_readers.py, run_readers.py) build on these few checks, and a malformed file fails on first use with one
line naming the file and entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml

from repro.catalog.records import CatalogError, Setting, Settings


def _read(filename: str) -> dict[str, Any]:
    text = resources.files("repro.catalog").joinpath(filename).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{filename}: not valid YAML: {' '.join(str(exc).split())}") from None
    return _mapping(data, filename)


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


def _settings_at(raw: Any, where: str) -> Settings:
    """Most sections are a mapping of settings read under one name: `where` names both in an error."""
    return _settings(_mapping(raw, where), where)
