"""Where the project keeps what it builds: $REPRO_HOME, else ~/.cache/repro (models/, data/)."""

from __future__ import annotations

import os
from pathlib import Path


def repro_home() -> Path:
    return Path(os.environ.get("REPRO_HOME", Path.home() / ".cache" / "repro"))
