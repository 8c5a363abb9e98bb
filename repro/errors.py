"""The one error type users see.

Anything the user can fix (an unknown name, a bad value, a missing file) is raised as `ReproError`;
the CLI prints its message as one line and exits with code 2. Everything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class ReproError(Exception):
    """A problem with the user's input, stated with its fix."""


def unknown_name(kind: str, name: str, valid: Iterable[str]) -> ReproError:
    return ReproError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(valid))}")
