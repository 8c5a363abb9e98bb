"""Reading row files users hand us (JSONL or Parquet), with one clear error when they cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

from repro.errors import ReproError


def read_rows(path: Path, what: str = "input file") -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise ReproError(f"{what} {path} does not exist")
    try:
        if path.suffix.lower() == ".parquet":
            import pandas as pd

            return pd.read_parquet(path).to_dict("records")
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (ValueError, OSError) as exc:
        raise ReproError(f"cannot read {what} {path}: {' '.join(str(exc).split())[:200]}") from exc
