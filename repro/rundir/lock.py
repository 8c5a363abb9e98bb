"""run.lock: the flock a live attempt holds for its whole life.

The kernel drops a flock when its process dies, however it dies, so the lock (not status.json, which
a killed process cannot update) is what tells a crashed run ("interrupted") from a live one.
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import TYPE_CHECKING

from repro.errors import ReproError
from repro.rundir.layout import RunLayout

_LOCK_RETRY_S = 0.3  # a concurrent `state` probe holds a shared lock for microseconds; don't call that "running"


def lock_text_if_held(path: str | os.PathLike[str]) -> str | None:
    """The text in a lock file whose flock a live process holds ("" if it wrote none), or None when nobody
    holds it. Probed with a shared non-blocking flock: it never waits, and two probes never see each other."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 32, 0).decode(errors="replace").strip()
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class RunLock(RunLayout):
    """Taking, probing and dropping run.lock; the open lock fd lives on this object."""

    if TYPE_CHECKING:  # provided by RunStatus in the composed RunDir

        def status(self) -> dict: ...

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        self._lock_fd: int | None = None

    def _lock_holder(self) -> int | None:
        """The pid holding run.lock (0 if held but unknown), or None if nobody does.

        Probes with a shared lock so that two readers probing at once never see each other as a live run.
        """
        text = lock_text_if_held(self._lock_path)
        if text is None:
            return None
        if text.isdigit():
            return int(text)
        try:
            attempts = self.status().get("attempts") or [{}]
            return int(attempts[-1].get("pid") or 0)  # 0: held, holder unknown
        except (ReproError, AttributeError, TypeError, ValueError):
            return 0

    def _lock(self) -> None:
        """Take run.lock exclusively and write our pid into it, or refuse: the run is live elsewhere."""
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        deadline = time.monotonic() + _LOCK_RETRY_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                text = os.pread(fd, 32, 0).decode(errors="replace").strip()
                os.close(fd)
                raise ReproError(
                    f"run {self.path} is already running (pid {text or 'unknown'}); wait for it or stop that process"
                ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
        self._lock_fd = None
