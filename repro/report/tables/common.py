"""What every table shares: the key and column names, the display order of backbones, methods, prompt sets and
benchmarks (catalog order first), and the checks and filters every builder applies to the tidy tables it reads."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from repro import paper
from repro.errors import ReproError
from repro.report.schema import BASE_MODEL_LABEL, NO_PROMPT_SET, RELEASED_SUFFIX, RUN_KEYS, require_columns

GROUP_KEYS = ("backbone", "prompt_set", "method")
REFERENCE_METHOD = "grpo-n4"
MISSING = "—"
MISSING_LATEX = "--"

WEIGHTED_MEASURED = "weighted measured"
WEIGHTED_PAPER = "weighted paper"
DELTA_PAPER = "delta paper"
DELTA_REFERENCE = f"delta {REFERENCE_METHOD}"
CI_LOW = " 95% low"  # suffixes of an interval's two columns; renderers print the pair as "<x> 95% CI"
CI_HIGH = " 95% high"
CI_SHOWN = " 95% CI"
N_PAIRED = "n_paired"
STEP_TIMING = "timing_s/step"

# builders record per-column decimals and the measured columns in DataFrame.attrs
_DECIMALS = "decimals"
_MEASURED = "measured"


# ------------------------------------------------------------------------------------------ ordering


def _order(kind: str) -> list[str]:
    """The display order of backbones, methods, prompt sets and benchmarks: catalog order first."""
    from repro import catalog

    if kind == "backbone":
        return list(catalog.backbones())
    if kind == "method":
        return list(catalog.methods())
    if kind == "prompt_set":
        return list(catalog.prompt_sets())
    if kind == "benchmark":
        from repro.tasks.tiny_arith import TIERS

        return [*paper.BENCHMARKS, *catalog.benchmarks(), *TIERS]
    raise ValueError(kind)


def _rank(values: Iterable[str], kind: str) -> dict[str, tuple[float, str]]:
    known = {name: i for i, name in reversed(list(enumerate(_order(kind))))}
    if kind == "method":
        return {v: (_method_position(str(v), known), str(v)) for v in values}
    if kind == "prompt_set":
        known = {NO_PROMPT_SET: -1, **known}  # a base model (trained on no prompt set) leads its backbone
    return {v: (known.get(v, len(known)), str(v)) for v in values}


def _method_position(method: str, known: dict[str, int]) -> float:
    """A base model before every method; a released checkpoint right after the method that trained it."""
    if method == BASE_MODEL_LABEL:
        return -1
    if method.endswith(RELEASED_SUFFIX) and method.removesuffix(RELEASED_SUFFIX) in known:
        return known[method.removesuffix(RELEASED_SUFFIX)] + 0.5
    return known.get(method, len(known))


def _sort(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    if frame.empty:
        return frame.reset_index(drop=True)
    ranks = {k: _rank(frame[k].unique(), k) for k in keys}
    return frame.sort_values(list(keys), key=lambda col: col.map(ranks[col.name])).reset_index(drop=True)


def sorted_names(names: Iterable[str], kind: str) -> list[str]:
    """Backbone, method or prompt-set names in display order: the catalog's first, then unknown ones
    alphabetically."""
    names = set(map(str, names))
    ranks = _rank(names, kind)
    return sorted(names, key=ranks.__getitem__)


def sorted_backbones(names: Iterable[str]) -> list[str]:
    return sorted_names(names, "backbone")


def _sorted_benchmarks(names: Iterable[str]) -> list[str]:
    names = set(names)
    ranks = _rank(names, "benchmark")
    return sorted(names, key=ranks.__getitem__)


# ------------------------------------------------------------------------------------------ inputs


def _select_checkpoint(eval_df: pd.DataFrame, checkpoint: str | int) -> pd.DataFrame:
    steps = pd.to_numeric(eval_df["checkpoint_step"], errors="coerce")
    if str(checkpoint) == "final":
        return eval_df[steps == steps.groupby(eval_df["run"]).transform("max")]
    try:
        step = int(str(checkpoint))
    except ValueError:
        raise ReproError(f"checkpoint must be 'final' or a step number, got {checkpoint!r}") from None
    return eval_df[steps == step]


def _filter_prompt_set(frame: pd.DataFrame, prompt_set: str | None) -> pd.DataFrame:
    if prompt_set is None or "prompt_set" not in frame.columns:
        return frame
    return frame[frame["prompt_set"] == prompt_set]


def _percent(values: pd.Series | pd.DataFrame) -> pd.Series | pd.DataFrame:
    return (values.astype(float) * 100).round(1)


def _measured_steps(training_df: pd.DataFrame, prompt_set: str | None) -> pd.DataFrame:
    if training_df is None:
        training_df = pd.DataFrame(columns=[*RUN_KEYS, "step"])
    require_columns(training_df, [*RUN_KEYS, "step"], "training")
    return _filter_prompt_set(training_df, prompt_set)
