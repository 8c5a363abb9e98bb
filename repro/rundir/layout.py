"""Where each file of a run folder lives, and what a grid cell's folder is called.

The rest of the package names files only through these properties, so the layout of the package
docstring is spelled out once; `collect` parses `cell_name` back, and verl writes into the same tree.
"""

from __future__ import annotations

import os
from pathlib import Path

from repro.cell import cell_name  # noqa: F401  (the name of a cell's folder: the resolved cell's)


class RunLayout:
    """The paths inside one run folder; the base every concern of `RunDir` builds on."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @property
    def metrics_dir(self) -> Path:
        return self.path / "metrics"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    @property
    def _status_path(self) -> Path:
        return self.path / "status.json"

    @property
    def _lock_path(self) -> Path:
        return self.path / "run.lock"
