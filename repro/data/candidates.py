"""Where `repro data filter` takes its candidates from: OpenR1-Math-220k `default`, the tiny-arith pool, a
local file, or a released pre-filtered verl set on the Hub.

Kept out of `repro.data.filter` because loading reads released Hub sets (`repro.data.released`), and
`released` itself builds on the filter's row functions to turn a Hub set into verl Parquet: with loading
here, filter <- released <- candidates, and no module imports back up.
"""

from __future__ import annotations

from pathlib import Path

from repro import catalog
from repro.data import released
from repro.data.filter import Candidate, candidates_from_rows, is_verl_row
from repro.errors import ReproError
from repro.rows import read_rows

OPENR1 = {"hf": "open-r1/OpenR1-Math-220k", "config": "default", "split": "train"}


def load_candidates(
    source: str, local_file: Path | None, template: catalog.PromptTemplate
) -> tuple[list[Candidate], bool]:
    """Rows to filter, and whether they are already a filtered verl set (released `RLHFlow/reinforce_ada_*`).

    `local_file` may also be a Hub id (a released set): it is loaded with `datasets` like OpenR1."""
    user_file = local_file is not None
    if source == "tiny-arith" and not user_file:
        from repro.tasks.tiny_arith import ensure_data

        local_file = ensure_data(0)["train"]
    if local_file is not None and released.is_hub_id(str(local_file)):
        rows = released.load_hub_rows(str(local_file))
    elif local_file is not None:
        rows = read_rows(Path(local_file))
    elif source == "openr1":
        try:
            from datasets import load_dataset

            rows = [dict(r) for r in load_dataset(OPENR1["hf"], OPENR1["config"], split=OPENR1["split"])]
        except Exception as exc:
            raise ReproError(
                f"cannot load {OPENR1['hf']} ({OPENR1['config']}) from the Hub ({type(exc).__name__}); "
                "download it elsewhere and pass --input FILE (JSONL/Parquet with problem, answer[, solution])"
            ) from exc
    else:
        raise ReproError(f"unknown --source {source!r}; valid: openr1, tiny-arith (or pass --input FILE)")
    prefiltered = bool(rows) and is_verl_row(rows[0])
    return candidates_from_rows(rows, source, template), prefiltered and user_file
