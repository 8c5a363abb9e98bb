"""Comparing a run's stored config with the one a resume asks for, and naming the difference.

A resume under a different config would silently mix two experiments in one curve, so `prepare`
refuses it; these helpers make that refusal say which keys differ (`trainer.lr: 1e-06 -> 2e-06`).
"""

from __future__ import annotations

from typing import Any

import yaml


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves, so a config difference can be named as `trainer.lr`."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out.update(_flatten(sub, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _short(value: Any, missing: bool = False) -> str:
    if missing:
        return "<absent>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def config_diff(old: dict, new: dict, limit: int = 3) -> tuple[list[str], int]:
    """Up to `limit` "key: old -> new" strings, and how many keys differ in all."""
    a, b = _flatten(old), _flatten(new)
    keys = sorted(k for k in a.keys() | b.keys() if (k in a) != (k in b) or a.get(k) != b.get(k))
    shown = [f"{k}: {_short(a.get(k), k not in a)} -> {_short(b.get(k), k not in b)}" for k in keys[:limit]]
    return shown, len(keys)


def normalise(config: dict) -> dict:
    """The config as it will read back from config.yaml (tuples become lists), so comparisons are fair."""
    return yaml.safe_load(yaml.safe_dump(config, sort_keys=False)) or {}
