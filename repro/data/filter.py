"""`repro data filter`: the paper's training-set construction (PROTOCOL.md "Training data").

Stages: load (OpenR1-Math-220k `default`, the tiny-arith pool, a local file, or a released pre-filtered
verl set), de-duplicate, drop prompts whose reference answer does not verify, sample the base model
`base_samples` times per prompt, keep 0 < pass rate <= threshold, and write verl Parquet plus a summary.
Sampling is the expensive stage, so its per-prompt results are appended to `samples.jsonl` as they come
and a rerun skips what is there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro.atomic import append_lines, drop_torn_tail, write_text
from repro.errors import ReproError
from repro.reward import compute_score
from repro.rows import read_rows
from repro.tasks.tiny_arith import SYSTEM_PROMPT

OPENR1 = {"hf": "open-r1/OpenR1-Math-220k", "config": "default", "split": "train"}


@dataclass(frozen=True)
class Candidate:
    key: str  # stable id from the problem text
    problem: str
    answer: str
    solution: str | None = None
    data_source: str = "openr1"


def _key(text: str) -> str:
    return hashlib.sha1(" ".join(text.split()).lower().encode()).hexdigest()[:16]


def load_candidates(source: str, local_file: Path | None) -> tuple[list[Candidate], bool]:
    """Rows to filter, and whether they are already a filtered verl set (released `RLHFlow/reinforce_ada_*`)."""
    user_file = local_file is not None
    if source == "tiny-arith" and not user_file:
        from repro.tasks.tiny_arith import ensure_data

        local_file = ensure_data(0)["train"]
    if local_file is not None:
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
    prefiltered = bool(rows) and "prompt" in rows[0] and "reward_model" in rows[0]
    out = []
    for row in rows:
        if "prompt" in row and "reward_model" in row:
            problem = next(m["content"] for m in row["prompt"] if m["role"] == "user")
            out.append(
                Candidate(
                    _key(problem),
                    problem,
                    str(row["reward_model"]["ground_truth"]),
                    None,
                    str(row.get("data_source", "released")),
                )
            )
        elif "problem" in row and "answer" in row:
            out.append(
                Candidate(_key(row["problem"]), str(row["problem"]), str(row["answer"]), row.get("solution"), source)
            )
        else:
            raise ReproError("input rows need problem and answer fields (or verl prompt/reward_model columns)")
    return out, prefiltered and user_file


def dedupe(rows: list[Candidate]) -> list[Candidate]:
    seen, out = set(), []
    for row in rows:
        if row.key not in seen:
            seen.add(row.key)
            out.append(row)
    return out


def reference_verifies(row: Candidate) -> bool:
    """PROTOCOL.md: keep a prompt when its reference solution or its annotated answer passes math-verify."""
    if compute_score("", f"\\boxed{{{row.answer}}}", row.answer) == 1.0:
        return True
    return bool(row.solution) and compute_score("", row.solution, row.answer) == 1.0


def sample_pass_counts(
    rows: list[Candidate],
    generate: Callable[[list[str], int, int], list[list[str]]],
    samples: int,
    seed: int,
    log: Path,
    chunk: int = 64,
    on_done: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Correct answers out of `samples` per prompt; resumable through the append-only `log`."""
    counts: dict[str, int] = {}
    if log.exists():
        drop_torn_tail(log)
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if record.get("samples") == samples:
                counts[record["key"]] = int(record["correct"])
    todo = [r for r in rows if r.key not in counts]
    if on_done and len(rows) - len(todo):
        on_done(len(rows) - len(todo))
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as handle:
        for start in range(0, len(todo), chunk):
            batch = todo[start : start + chunk]
            texts = generate([r.problem for r in batch], samples, seed * 1_000_003 + start)
            lines = []
            for row, group in zip(batch, texts, strict=True):
                correct = int(sum(compute_score(row.data_source, t, row.answer) for t in group))
                counts[row.key] = correct
                lines.append(json.dumps({"key": row.key, "samples": samples, "correct": correct}))
            append_lines(handle, lines)
            if on_done:
                on_done(len(batch))
    return counts


def verl_rows(rows: list[Candidate], split: str) -> list[dict]:
    return [
        {
            "data_source": r.data_source,
            "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": r.problem}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": r.answer},
            "extra_info": {"split": split, "index": i, "key": r.key},
        }
        for i, r in enumerate(rows)
    ]


def write_split(
    rows: list[Candidate],
    out_dir: Path,
    val_size: int,
    seed: int,
    max_val_tokens: int,
    count_tokens: Callable[[str], int],
) -> dict[str, int]:
    """Shuffle, carve a validation split (prompts over `max_val_tokens` tokens stay out of it), write Parquet."""
    import pandas as pd

    order = np.random.default_rng(seed).permutation(len(rows))
    shuffled = [rows[i] for i in order]
    val, train = [], []
    for row in shuffled:
        if len(val) < val_size and count_tokens(row.problem) <= max_val_tokens:
            val.append(row)
        else:
            train.append(row)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", train), ("val", val)):
        tmp = out_dir / f".{name}.parquet.tmp"
        columns = ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        pd.DataFrame(verl_rows(part, name), columns=columns).to_parquet(tmp, index=False)
        tmp.replace(out_dir / f"{name}.parquet")
    return {"train": len(train), "val": len(val)}


def histogram(counts: dict[str, int], samples: int) -> list[int]:
    return np.bincount(np.asarray(list(counts.values()), dtype=int), minlength=samples + 1).tolist()


def write_summary(out_dir: Path, summary: dict) -> Path:
    return write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
