"""Creating a run folder whole, resuming an existing one, or refusing with a one-line fix.

A run folder appears by renaming a complete hidden sibling into place, so it is whole or absent;
`--overwrite` moves an old run aside instead of deleting it; and only a folder holding our status.json
is ever treated as a run, so somebody else's folder is never touched.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

import yaml

from repro.atomic import fsync_dir, write_text
from repro.errors import ReproError
from repro.rundir.config_diff import config_diff, normalise
from repro.rundir.lock import RunLock
from repro.rundir.status import STATES, RunStatus, now


class RunCreation(RunStatus, RunLock):
    """`prepare` (create / resume / refuse) and the checks and moves it is made of."""

    @classmethod
    def prepare(
        cls, path: str | os.PathLike[str], config: dict, command: list[str], *, overwrite: bool = False
    ) -> Self:
        """Create, resume, or refuse; every refusal is one ReproError line that says the fix."""
        path = Path(path)
        if path.is_symlink():
            path = path.resolve()
        new_config = normalise(config)
        for _ in range(3):  # retried only if another process created the folder under us
            if not path.exists() or (path.is_dir() and not any(path.iterdir())):
                try:
                    return cls._create(path, new_config, command)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                        raise
                    continue
            run = cls(path)
            run._check_is_run(half_written_ok=overwrite)
            pid = run._lock_holder()
            if pid is not None:
                who = f"pid {pid}" if pid else "pid unknown"
                raise ReproError(f"run {path} is already running ({who}); wait for it or stop that process")
            if overwrite:
                run._move_aside()
                continue
            old_config = run.config()
            if old_config != new_config:
                shown, total = config_diff(old_config, new_config)
                more = f" (and {total - len(shown)} more)" if total > len(shown) else ""
                raise ReproError(
                    f"run {path} was made with a different config ({'; '.join(shown)}{more}); "
                    "use --overwrite to start over or --run-dir for a new run"
                )
            if run.state == "finished":
                raise ReproError(f"run {path} already finished; use --overwrite to run it again")
            return run
        raise ReproError(f"run {path} keeps changing under us; is another repro run using it?")

    @classmethod
    def _create(cls, path: Path, config: dict, command: list[str]) -> Self:
        """Build the run in a hidden sibling and rename it into place: a run folder is whole or absent."""
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.parent / f".{path.name}.creating-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            staging.mkdir()
            for sub in ("metrics", "checkpoints", "eval"):
                (staging / sub).mkdir()
            write_text(staging / "config.yaml", yaml.safe_dump(config, sort_keys=False))
            write_text(staging / "command.json", json.dumps({"argv": list(command), "cwd": os.getcwd()}) + "\n")
            status = {"state": "pending", "created": now(), "attempts": []}
            write_text(staging / "status.json", json.dumps(status, indent=2) + "\n")
            os.rename(staging, path)  # POSIX: replaces an empty directory, fails on a non-empty one
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fsync_dir(path.parent)
        return cls(path)

    def _check_is_run(self, *, half_written_ok: bool = False) -> None:
        """Refuse folders that are not runs, and runs whose bookkeeping is unreadable (half-written).

        A half-written run has our status.json, so --overwrite may move it aside; a folder without one
        is somebody else's and is never touched.
        """
        where = self.path
        if not where.is_dir():
            raise ReproError(f"{where} is a file, not a run directory; pass another --run-dir")
        if not self._status_path.exists():
            raise ReproError(
                f"{where} is not a repro run directory (no status.json); pass another --run-dir or remove it"
            )
        if half_written_ok:
            return
        fix = "use --overwrite to move it aside and start over, or pass another --run-dir"
        try:
            status = json.loads(self._status_path.read_text())
            ok = isinstance(status, dict) and status.get("state") in STATES and isinstance(status.get("attempts"), list)
        except (OSError, ValueError):
            ok = False
        if not ok:
            raise ReproError(f"run {where} is half-written (status.json is unreadable or corrupt); {fix}")
        try:
            config = yaml.safe_load((self.path / "config.yaml").read_text())
        except FileNotFoundError:
            raise ReproError(f"run {where} is half-written (config.yaml is missing); {fix}") from None
        except (OSError, yaml.YAMLError):
            config = None
        if not isinstance(config, dict):
            raise ReproError(f"run {where} is half-written (config.yaml is unreadable or corrupt); {fix}")

    def _move_aside(self) -> Path:
        """--overwrite never deletes: the old run becomes `<name>.replaced-<UTC time>` beside the new one."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        target = self.path.with_name(f"{self.path.name}.replaced-{stamp}")
        n = 1
        while target.exists():
            n += 1
            target = self.path.with_name(f"{self.path.name}.replaced-{stamp}-{n}")
        os.rename(self.path, target)
        return target
