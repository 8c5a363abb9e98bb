"""The results folder's files: every table written atomically under collect's lock, and read back whole."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd

from repro.atomic import fsync_dir
from repro.errors import ReproError
from repro.report.schema import MATCHED_TABLES, TABLES

LOCK_NAME = ".collect.lock"


@contextlib.contextmanager
def results_lock(results: Path, shared: bool = False) -> Iterator[None]:
    """Hold results/.collect.lock: exclusive while collect writes; shared for a reader wanting one version."""
    fd = os.open(results / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)  # blocks until the other collect is done
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _stage(path: Path, write: Callable[[Path], None]) -> Path:
    """Write a complete, fsynced temporary sibling of `path`; the caller renames it into place."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_tables(tables: dict[str, pd.DataFrame], results: Path) -> list[Path]:
    """Write every table as <name>.parquet and <name>.csv, each atomically; the caller holds the lock.

    All temporary files are written and fsynced first and only then renamed into place, so a failure while
    writing (disk full, a crash) leaves every previous file as it was and no temporary file behind.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for name, frame in tables.items():
            for target, write in (
                (results / f"{name}.parquet", lambda p, f=frame: f.to_parquet(p, index=False, engine="pyarrow")),
                (results / f"{name}.csv", lambda p, f=frame: f.to_csv(p, index=False)),
            ):
                staged.append((_stage(target, write), target))
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(results)
    return [target for _, target in staged]


def read_results(results: str | os.PathLike[str] = "results") -> dict[str, pd.DataFrame]:
    """The tables a collect wrote (parquet), read under a shared lock so all come from the same collect."""
    results = Path(results)
    missing = [name for name in TABLES if not (results / f"{name}.parquet").exists()]
    if missing:
        raise ReproError(f"{results} has no {', '.join(missing)} table; run `repro collect` first")
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):  # a read-only copy of results/ is read without the lock
            stack.enter_context(results_lock(results, shared=True))
        tables = {name: pd.read_parquet(results / f"{name}.parquet") for name in TABLES}
        for name in MATCHED_TABLES:  # absent from results collected before token budgets
            if (results / f"{name}.parquet").exists():
                tables[name] = pd.read_parquet(results / f"{name}.parquet")
        return tables
