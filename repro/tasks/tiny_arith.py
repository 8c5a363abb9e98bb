"""tiny-arith: a synthetic, verifiable arithmetic task that a tiny model finds easy to very hard.

Difficulty comes from operand digits and the operation (a one-digit sum is easy, a two-digit product
is out of reach), so a small model's pass rates spread across prompts the way a real base model's do
across OpenR1 problems. Problems are stated in words and answered with \\boxed{...}; the rows use the
verl format of PROTOCOL.md so every downstream tool reads them like the real data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA_SOURCE = "tiny-arith"

# level -> (digits of a, digits of b, operation); higher levels are harder for a tiny model
LEVELS: dict[int, tuple[int, int, str]] = {
    1: (1, 1, "+"),
    2: (1, 1, "-"),
    3: (2, 1, "+"),
    4: (1, 1, "*"),
    5: (2, 1, "-"),
    6: (2, 2, "+"),
    7: (2, 2, "-"),
    8: (2, 1, "*"),
    9: (3, 2, "+"),
    10: (2, 2, "*"),
}
WORDS = {"+": "plus", "-": "minus", "*": "times"}
# One phrasing: a 0.1M-parameter model learns to find the operands far faster when they sit in the same
# place; the words are still words, and difficulty comes from the arithmetic alone.
TEMPLATES = ("What is {a} {op} {b}?",)

# Held-out test sets shaped like the paper's four benchmarks: increasing difficulty, sizes in the
# paper's ratio (500/272/675/230) scaled by 1/5.
TIERS: dict[str, dict[str, object]] = {
    "tiny-math500": {"size": 100, "levels": (1, 2, 3, 4, 5, 6), "mirrors": "math500"},
    "tiny-minerva": {"size": 54, "levels": (3, 4, 5, 6, 7, 8), "mirrors": "minerva_math"},
    "tiny-olympiad": {"size": 135, "levels": (5, 6, 7, 8, 9), "mirrors": "olympiadbench"},
    "tiny-aime": {"size": 46, "levels": (7, 8, 9, 10), "mirrors": "aime_like"},
}
# Training pool per level. Levels 1, 2 and 4 have only 100, 55 and 100 distinct problems, so the pool is
# built per level rather than by weights (a weighted draw of distinct problems would run out of easy
# ones early and leave the tail of the pool all hard). Mid levels dominate: that is where a warm-started
# tiny model has pass rates strictly between 0 and 1, the prompts RL can learn from.
TRAIN_LEVEL_COUNTS: dict[int, int] = {1: 60, 2: 30, 3: 800, 4: 60, 5: 800, 6: 500, 7: 500, 8: 800, 9: 200, 10: 200}


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str
    level: int
    a: int
    b: int
    op: str


def _operand(rng: np.random.Generator, digits: int) -> int:
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return int(rng.integers(low, 10**digits))


def make_problem(rng: np.random.Generator, level: int) -> Problem:
    da, db, op = LEVELS[level]
    a, b = _operand(rng, da), _operand(rng, db)
    if op == "-" and da == db == 1 and b > a:
        a, b = b, a  # level 2 stays non-negative; level 7 may go below zero
    value = a + b if op == "+" else a - b if op == "-" else a * b
    template = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    return Problem(template.format(a=a, op=WORDS[op], b=b), str(value), level, a, b, op)


def sample_problems(
    rng: np.random.Generator,
    count: int,
    levels: tuple[int, ...],
    weights=None,
    exclude: set[str] | frozenset[str] = frozenset(),
) -> list[Problem]:
    """`count` distinct problems (by question text) from the given levels, none of them in `exclude`."""
    probs = None if weights is None else np.asarray(weights) / np.sum(weights)
    seen, out = set(exclude), []
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > 200 * count + 1000:
            raise ValueError(f"cannot draw {count} distinct problems from levels {levels}")
        level = int(levels[rng.choice(len(levels), p=probs)])
        problem = make_problem(rng, level)
        if problem.question not in seen:
            seen.add(problem.question)
            out.append(problem)
    return out


def verl_row(problem: Problem, split: str, index: int, data_source: str, backbone: str = "tiny-arith") -> dict:
    """One row in verl's RL dataset format (PROTOCOL.md), with the prompt template of the backbone that
    trains on it (tiny-arith's own, or a real LLM's on the same problems)."""
    from repro.prompting import chat_messages, template_for

    return {
        "data_source": data_source,
        "prompt": chat_messages(problem.question, template_for(backbone)),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": problem.answer},
        "extra_info": {"split": split, "index": index, "level": problem.level},
    }


@dataclass(frozen=True)
class TinyArithData:
    train: list[Problem]
    tiers: dict[str, list[Problem]]


def build(seed: int = 0, train_scale: float = 1.0) -> TinyArithData:
    """The whole task from one seed: test tiers first (held out), then a training pool disjoint from them.

    `train_scale` shrinks the pool (tests); the pool is shuffled so levels are interleaved."""
    rng = np.random.default_rng([seed, 2510_04996])
    tiers: dict[str, list[Problem]] = {}
    held_out: set[str] = set()
    for name, tier in TIERS.items():
        problems = sample_problems(rng, int(tier["size"]), tuple(tier["levels"]), exclude=held_out)
        held_out.update(p.question for p in problems)
        tiers[name] = problems
    train: list[Problem] = []
    for level, count in TRAIN_LEVEL_COUNTS.items():
        train += sample_problems(rng, max(1, round(count * train_scale)), (level,), exclude=held_out)
    order = rng.permutation(len(train))
    return TinyArithData([train[i] for i in order], tiers)


def write_parquet(data: TinyArithData, folder: Path, backbone: str = "tiny-arith") -> dict[str, Path]:
    """train.parquet plus one parquet per test tier, written atomically (temp file + rename); the temp
    name is per process, so cells of a sweep that build the data at once on an empty $REPRO_HOME write the
    same bytes side by side instead of renaming each other's half-written file away."""
    import os

    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    files = {"train": [verl_row(p, "train", i, DATA_SOURCE, backbone) for i, p in enumerate(data.train)]}
    for name, problems in data.tiers.items():
        files[name] = [verl_row(p, "test", i, name, backbone) for i, p in enumerate(problems)]
    out = {}
    for name, rows in files.items():
        path = folder / f"{name}.parquet"
        tmp = folder / f".{name}.parquet.{os.getpid()}.tmp"
        pd.DataFrame(rows).to_parquet(tmp, index=False)
        tmp.replace(path)
        out[name] = path
    return out


DATA_VERSION = 3


def data_folder(seed: int = 0, home: Path | None = None, backbone: str = "tiny-arith") -> Path:
    """The task's files for a backbone: the same problems, the rows' chat in the backbone's prompt template
    (the folder's name says which template when it is not tiny-arith's own)."""
    from repro.paths import repro_home
    from repro.prompting import template_for

    template = template_for(backbone).key
    suffix = "" if template == "tiny" else f"-{template}"
    return (home or repro_home()) / "data" / f"tiny-arith-v{DATA_VERSION}-s{seed}{suffix}"


def ensure_data(seed: int = 0, home: Path | None = None, backbone: str = "tiny-arith") -> dict[str, Path]:
    """The task's Parquet files, generated on first use into $REPRO_HOME/data and reused afterwards."""
    folder = data_folder(seed, home, backbone)
    names = ["train", *TIERS]
    if all((folder / f"{n}.parquet").exists() for n in names):
        return {n: folder / f"{n}.parquet" for n in names}
    return write_parquet(build(seed), folder, backbone)
