"""`RunDir`, the one object the rest of repro holds for a run folder, composed from one mixin per concern.

Callers keep a single handle (create or resume it, run attempts, write checkpoints, read metrics) while
each concern lives in its own module; the mixins share nothing but the folder's layout and `self`.
"""

from __future__ import annotations

from repro.rundir.attempts import RunAttempts
from repro.rundir.checkpoints import RunCheckpoints
from repro.rundir.create import RunCreation


class RunDir(RunCreation, RunAttempts, RunCheckpoints):
    """One run folder. `prepare` is how `repro run` gets one; `RunDir(path)` just opens it for reading."""

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"
