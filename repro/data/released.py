"""The authors' released prompt sets, accepted by Hub id and turned into the local verl Parquet verl reads.

verl's RLHFDataset reads local Parquet/JSON files only, so a Hub id given as a training or validation
set (`--train-file RLHFlow/reinforce_ada_hard_prompt`, `--val-file weqweasdas/validate`, the released
preset's default sets) is downloaded once into `$REPRO_HOME/data/hub/<owner>__<name>/` and rebuilt
there with the backbone's prompt template and the 700-token filter. Rows go through the same code as
`repro data filter`'s output, so a released set and a set filtered here are the same kind of file. The
download happens when the run starts (on the node that trains), never during a dry run.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from repro import catalog
from repro.atomic import write_text
from repro.errors import ReproError

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_FILE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv")
ROLES = ("train", "val")


def is_hub_id(text: str) -> bool:
    """`owner/name` that is not a file here: a local path always wins, and file names are never Hub ids."""
    text = str(text)
    return bool(_HUB_ID.fullmatch(text)) and not text.endswith(_FILE_SUFFIXES) and not os.path.exists(text)


def cache_file(hub_id: str, role: str) -> Path:
    from repro.paths import repro_home

    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return repro_home() / "data" / "hub" / hub_id.replace("/", "__") / f"{role}.parquet"


def load_hub_rows(hub_id: str, split: str = "train") -> list[dict]:
    """Every row of a Hub dataset split (the released sets keep everything in `train`)."""
    try:
        from datasets import load_dataset

        return [dict(row) for row in load_dataset(hub_id, split=split)]
    except Exception as exc:
        raise ReproError(
            f"cannot load {hub_id} from the Hugging Face Hub ({type(exc).__name__}); download it where the Hub "
            "is reachable and pass the Parquet file instead (--train-file/--val-file/--input PATH)"
        ) from exc


def released_training_set(backbone: catalog.Backbone, prompt_set: str, preset: str) -> str | None:
    """The Hub id of the authors' training set for this cell under `preset`, or None (paper preset, or none
    released for that backbone and prompt set). Qwen3-4B takes the 7B hard set, as the released run did."""
    if preset != "released":
        return None
    source = catalog.get_backbone(backbone.train_prompts_from(preset))
    return source.released_prompt_sets.get(prompt_set)


def released_validation_set() -> str:
    return catalog.get_prompt_set("standard").settings["released_validation"].value


def materialise(
    hub_id: str,
    backbone: catalog.Backbone,
    role: str,
    *,
    loader: Callable[[str], list[dict]] | None = None,
    count_tokens: Callable[[str], int] | bool | None = True,
) -> Path:
    """The local verl Parquet of a released set, downloaded and built on first use (atomically: a killed
    download leaves no half file). `count_tokens=True` loads the backbone's tokenizer for the 700-token
    filter; pass a function (tests) or None (no filter). `loader` defaults to `load_hub_rows`."""
    from repro.data import filter as flt
    from repro.prompting import template_for

    path = cache_file(hub_id, role)
    if path.exists():
        return path
    template = template_for(backbone)
    rows = (loader or load_hub_rows)(hub_id)
    candidates = flt.candidates_from_rows(rows, hub_id, template)
    if count_tokens is True:
        from repro.weights_cache import local_weights

        hf_id = backbone.hf_id
        count_tokens = flt.token_counter(local_weights(hf_id)) if hf_id else None  # the cached tokenizer if any
    max_tokens = flt.max_prompt_tokens()
    kept, dropped = flt.drop_long(candidates, max_tokens, count_tokens or None)
    if not kept:
        raise ReproError(f"{hub_id} has no usable rows ({len(rows)} loaded, {dropped} over {max_tokens} tokens)")
    flt.write_rows(kept, path, "train" if role == "train" else "test", template)
    summary = {
        "hub_id": hub_id,
        "backbone": backbone.key,
        "role": role,
        "prompt_template": template.key,
        "loaded": len(rows),
        "too_long_dropped": dropped if count_tokens else None,
        "rows": len(kept),
    }
    write_text(path.with_suffix(".summary.json"), json.dumps(summary, indent=2) + "\n")
    return path
