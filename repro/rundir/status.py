"""status.json and config.yaml read back: what a run says about itself, and its state corrected by the lock.

status.json is rewritten atomically at each attempt's start and end; a killed process leaves it saying
"running", so `state` asks run.lock before believing that.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import yaml

from repro.atomic import write_text
from repro.errors import ReproError
from repro.rundir.layout import RunLayout

STATES = ("pending", "running", "finished", "failed", "interrupted")
END_STATES = ("finished", "failed", "interrupted")


def now() -> str:
    """The timestamp format of status.json."""
    return datetime.now(UTC).isoformat(timespec="seconds")


class RunStatus(RunLayout):
    """Reading status.json and config.yaml, and rewriting status.json."""

    if TYPE_CHECKING:  # provided by RunLock in the composed RunDir
        _lock_fd: int | None

        def _lock_holder(self) -> int | None: ...

    def status(self) -> dict:
        """status.json as written (its "state" may say running for a dead process; see `state`)."""
        try:
            status = json.loads(self._status_path.read_text())
        except FileNotFoundError:
            raise ReproError(f"{self.path} is not a repro run directory (no status.json)") from None
        except ValueError:
            raise ReproError(f"run {self.path} has a corrupt status.json; move the run aside and start over") from None
        if not isinstance(status, dict):
            raise ReproError(f"run {self.path} has a corrupt status.json; move the run aside and start over")
        return status

    def config(self) -> dict:
        """The resolved config the run was created with."""
        try:
            return yaml.safe_load((self.path / "config.yaml").read_text()) or {}
        except FileNotFoundError:
            raise ReproError(f"run {self.path} has no config.yaml; move the run aside and start over") from None

    @property
    def state(self) -> str:
        """The run's state, trusting the lock over status.json: "running" with no live holder is "interrupted"."""
        state = self.status().get("state", "pending")
        if state == "running" and self._lock_fd is None and self._lock_holder() is None:
            return "interrupted"
        return state

    def _write_status(self, status: dict) -> None:
        status["updated"] = now()
        write_text(self._status_path, json.dumps(status, indent=2) + "\n")
