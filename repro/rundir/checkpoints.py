"""Checkpoints under checkpoints/: verl's global_step_<k> naming, each made visible only once whole.

A checkpoint is filled in a hidden staging dir and renamed into place, and old ones are renamed away
before they are deleted, so a kill at any moment never leaves a partial dir that resume would trust.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from repro.atomic import fsync_dir, write_text
from repro.rundir.layout import RunLayout

LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's tracker file name
COMPLETE_MARKER = "COMPLETE"

_STEP_DIR_RE = re.compile(r"global_step_(\d+)")
# Hidden work dirs under checkpoints/: being filled, being replaced, being deleted. The pid says whose.
_WORK_DIR_RE = re.compile(r"\.(staging|old|deleting)-global_step_(\d+)-(\d+)")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunCheckpoints(RunLayout):
    """Staging, committing, finding and pruning a run's checkpoints."""

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_dir / f"global_step_{step}"

    def staging_checkpoint_dir(self, step: int) -> Path:
        """An empty hidden dir to fill; `commit_checkpoint` makes it visible only once it is whole."""
        staging = self.checkpoints_dir / f".staging-global_step_{step}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        return staging

    def _complete_steps(self) -> dict[int, Path]:
        if not self.checkpoints_dir.is_dir():
            return {}
        out = {}
        for entry in self.checkpoints_dir.iterdir():
            match = _STEP_DIR_RE.fullmatch(entry.name)
            if match and (entry / COMPLETE_MARKER).is_file():
                out[int(match.group(1))] = entry
        return out

    def _latest_pointer(self) -> int | None:
        try:
            return int((self.checkpoints_dir / LATEST_FILE).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        """The checkpoint to resume from.

        The tracker file wins when the dir it names exists: it is written only after a save finished (by
        `commit_checkpoint`, and by verl, whose dirs carry no COMPLETE marker). Otherwise the highest
        global_step_* dir holding COMPLETE.
        """
        pointed = self._latest_pointer()
        if pointed is not None and self.checkpoint_dir(pointed).is_dir():
            return pointed, self.checkpoint_dir(pointed)
        complete = self._complete_steps()
        if not complete:
            return None
        step = max(complete)
        return step, complete[step]

    def commit_checkpoint(self, step: int, staging: Path) -> Path:
        """Mark `staging` complete, rename it to global_step_<step>, then point the tracker file at it."""
        staging = Path(staging)
        if not staging.is_dir():
            raise ValueError(f"staging checkpoint {staging} is not a directory")
        write_text(staging / COMPLETE_MARKER, f"{step}\n")
        final = self.checkpoint_dir(step)
        old = None
        if final.exists():  # rename the old one out of the way; it is deleted only after the new one is in
            old = self.checkpoints_dir / f".old-global_step_{step}-{os.getpid()}"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
        os.rename(staging, final)
        fsync_dir(self.checkpoints_dir)
        write_text(self.checkpoints_dir / LATEST_FILE, f"{step}\n")
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def prune_checkpoints(self, keep_every: int, keep_last: int = 1, also: Iterable[int] = ()) -> list[int]:
        """Delete complete checkpoints that are neither among the newest `keep_last`, nor a multiple of
        `keep_every`, nor in `also`, nor the one the tracker file names; clear stale hidden work dirs. Returns
        the deleted steps. Incomplete global_step_* dirs are left alone (they may be verl's)."""
        if keep_every < 1 or keep_last < 0:
            raise ValueError(f"need keep_every >= 1 and keep_last >= 0, got {keep_every}, {keep_last}")
        complete = self._complete_steps()
        keep = set(sorted(complete)[-keep_last:]) if keep_last else set()
        keep |= {s for s in complete if s % keep_every == 0} | set(also)
        latest = self.latest_checkpoint()
        if latest is not None:
            keep.add(latest[0])
        deleted = []
        for step in sorted(set(complete) - keep):
            # rename first: a kill midway through rmtree must not leave a gutted dir that still says COMPLETE
            doomed = self.checkpoints_dir / f".deleting-global_step_{step}-{os.getpid()}"
            os.rename(complete[step], doomed)
            shutil.rmtree(doomed)
            deleted.append(step)
        if self.checkpoints_dir.is_dir():
            for entry in self.checkpoints_dir.iterdir():
                match = _WORK_DIR_RE.fullmatch(entry.name)
                if match and int(match.group(3)) != os.getpid() and not _pid_alive(int(match.group(3))):
                    shutil.rmtree(entry, ignore_errors=True)
        return deleted
