"""`repro data filter`: the paper's training-set construction (PROTOCOL.md "Training data").

Stages: load (`repro.data.candidates`: OpenR1-Math-220k `default`, the tiny-arith pool, a local file, or a
released pre-filtered verl set), de-duplicate, drop prompts whose reference answer does not verify, sample
the base model `base_samples` times per prompt, keep 0 < pass rate <= threshold, drop prompts over 700 tokens (training
and validation alike, as the released reformat.py does), and write verl Parquet plus a summary. Every
prompt is built with the backbone's template (`repro.prompting`): the filter samples the very chat that
training and evaluation send.
Sampling is the expensive stage, so its per-prompt results are appended to `samples.jsonl` as they come
and a rerun skips what is there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro import catalog
from repro.atomic import append_lines, drop_torn_tail, write_text
from repro.errors import ReproError
from repro.prompting import chat_messages, last_user_turn, problem_text
from repro.reward import compute_score


@dataclass(frozen=True)
class Candidate:
    key: str  # stable id from the problem text
    problem: str
    answer: str
    solution: str | None = None
    data_source: str = "openr1"


def _key(text: str) -> str:
    return hashlib.sha1(" ".join(text.split()).lower().encode()).hexdigest()[:16]


def is_verl_row(row: dict) -> bool:
    return "prompt" in row and "reward_model" in row


def candidates_from_rows(rows: list[dict], source: str, template: catalog.PromptTemplate) -> list[Candidate]:
    """verl rows (their user turn back to the bare problem, so the template's suffix is never doubled) or
    raw rows with `problem` and `answer` (or `gt`, the released selection files' name for it)."""
    out = []
    for row in rows:
        if is_verl_row(row):
            user = last_user_turn(row["prompt"])
            problem = problem_text(user, template)
            answer = str(row["reward_model"]["ground_truth"])
            out.append(Candidate(_key(problem), problem, answer, None, str(row.get("data_source", "released"))))
        elif "problem" in row and ("answer" in row or "gt" in row):
            answer = str(row["answer"] if "answer" in row else row["gt"])
            out.append(Candidate(_key(row["problem"]), str(row["problem"]), answer, row.get("solution"), source))
        else:
            raise ReproError(
                "input rows need problem and answer (or gt) fields, or verl prompt/reward_model columns; "
                f"got {sorted(row)}"
            )
    return out


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


def _logged_counts(log: Path, fingerprint: dict[str, object], *, own: bool) -> dict[str, int]:
    """Counts from one pass-count log whose records match `fingerprint` (model, samples, seed). A record
    from before the fingerprint was logged is trusted only in the folder's own log, on its sample count."""
    counts: dict[str, int] = {}
    if not log.exists():
        return counts
    if own:
        drop_torn_tail(log)
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a sibling's torn tail: not ours to repair
        if "model" in record:
            if any(record.get(k) != v for k, v in fingerprint.items()):
                continue
        elif not own or record.get("samples") != fingerprint["samples"]:
            continue
        counts[record["key"]] = int(record["correct"])
    return counts


def sample_pass_counts(
    rows: list[Candidate],
    generate: Callable[[list[str], int, int], list[list[str]]],
    samples: int,
    seed: int,
    log: Path,
    chunk: int = 64,
    on_done: Callable[[int], None] | None = None,
    *,
    model: str = "",
    template: str = "",
    reuse: Sequence[Path] = (),
    generate_all: Callable[[list[tuple[list[str], int, int]]], Iterable[list[list[str]]]] | None = None,
) -> dict[str, int]:
    """Correct answers out of `samples` per prompt; resumable through the append-only `log`.

    A pass count is a fact about the base model and the prompt, not about the threshold that keeps it, so
    counts logged by another prompt set's filter (`reuse`: the hard set after the standard set) with the
    same model, samples and seed are taken too and copied into `log`: the base model samples each prompt
    once, which on a real backbone is most of the filter's GPU time. The prompt template is part of the
    fingerprint: the same model asked another way is another pass rate.

    Each chunk of `chunk` prompts is one `generate(problems, samples, seed)` call with a seed of its own, so
    `generate_all` (the calls in order -> their results in order, e.g. `GeneratorPool.generate_all` over worker
    processes) gives the same counts as calling `generate` chunk by chunk."""
    fingerprint = {"model": model, "template": template, "samples": samples, "seed": seed}
    counts = _logged_counts(log, fingerprint, own=True)
    borrowed: dict[str, int] = {}
    wanted = {r.key for r in rows}
    for other in reuse:
        if other.resolve() != log.resolve():
            for key, correct in _logged_counts(other, fingerprint, own=False).items():
                if key in wanted and key not in counts:
                    borrowed[key] = correct
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as handle:
        append_lines(handle, [json.dumps({"key": k, "correct": c, **fingerprint}) for k, c in borrowed.items()])
        counts.update(borrowed)
        todo = [r for r in rows if r.key not in counts]
        if on_done and len(rows) - len(todo):
            on_done(len(rows) - len(todo))
        starts = range(0, len(todo), chunk)
        calls = [([r.problem for r in todo[s : s + chunk]], samples, seed * 1_000_003 + s) for s in starts]
        results = generate_all(calls) if generate_all else (generate(*call) for call in calls)
        for start, texts in zip(starts, results, strict=True):
            batch = todo[start : start + chunk]
            lines = []
            for row, group in zip(batch, texts, strict=True):
                correct = int(sum(compute_score(row.data_source, t, row.answer) for t in group))
                counts[row.key] = correct
                lines.append(json.dumps({"key": row.key, "correct": correct, **fingerprint}))
            append_lines(handle, lines)
            if on_done:
                on_done(len(batch))
    return counts


def verl_rows(rows: list[Candidate], split: str, template: catalog.PromptTemplate) -> list[dict]:
    return [
        {
            "data_source": r.data_source,
            "prompt": chat_messages(r.problem, template),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": r.answer},
            "extra_info": {"split": split, "index": i, "key": r.key},
        }
        for i, r in enumerate(rows)
    ]


def max_prompt_tokens() -> int:
    """The prompt-length limit every prompt set shares (prompt_sets.yaml `common`, released reformat.py)."""
    return int(catalog.get_prompt_set("standard").settings["max_prompt_tokens"].value)


def drop_long(
    rows: list[Candidate], max_tokens: int, count_tokens: Callable[[str], int] | None
) -> tuple[list[Candidate], int]:
    """Prompts whose problem text is at most `max_tokens` tokens (the released reformat.py counts the bare
    problem with the backbone's tokenizer); without a tokenizer nothing is dropped. Returns (kept, dropped)."""
    if count_tokens is None:
        return rows, 0
    kept = [r for r in rows if count_tokens(r.problem) <= max_tokens]
    return kept, len(rows) - len(kept)


VERL_COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]


def write_rows(rows: list[Candidate], path: Path, split: str, template: catalog.PromptTemplate) -> Path:
    """One verl Parquet file, written atomically (temp file + rename)."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pd.DataFrame(verl_rows(rows, split, template), columns=VERL_COLUMNS).to_parquet(tmp, index=False)
    tmp.replace(path)
    return path


def write_split(
    rows: list[Candidate], out_dir: Path, val_size: int, seed: int, template: catalog.PromptTemplate
) -> dict[str, int]:
    """Shuffle, carve a validation split, write train/val Parquet (rows already length-filtered)."""
    order = np.random.default_rng(seed).permutation(len(rows))
    shuffled = [rows[i] for i in order]
    val, train = shuffled[:val_size], shuffled[val_size:]
    for name, part in (("train", train), ("val", val)):
        write_rows(part, out_dir / f"{name}.parquet", name, template)
    return {"train": len(train), "val": len(val)}


def token_counter(model_path: str | Path) -> Callable[[str], int] | None:
    """Tokens of a text with the backbone's tokenizer, counted as the released reformat.py counts them
    (`tokenizer.encode(problem)`, special tokens included); None when the tokenizer cannot be loaded (the
    caller says so)."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    except Exception:
        return None
    return lambda text: len(tokenizer.encode(text))


def histogram(counts: dict[str, int], samples: int) -> list[int]:
    return np.bincount(np.asarray(list(counts.values()), dtype=int), minlength=samples + 1).tolist()


def write_summary(out_dir: Path, summary: dict) -> Path:
    return write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
