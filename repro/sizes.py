"""Byte counts as people read them (decimal units, as disks and the Hub report sizes): one formatter for every
line that states a size (preflight, stack check, weights cache, checkpoint retention)."""

from __future__ import annotations


def size_text(n: float, digits: int = 1) -> str:
    """`121.8 GB`, `166.91 kB` (digits=2), `12 B`."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.{digits}f} {unit}"
    return f"{int(n)} B"
