"""The evaluation benchmarks: the paper's four (from the Hub or a local file) and the tiny-arith tiers.

Every loader returns the same `Problem` rows and checks the size: a benchmark that silently lost or
gained problems would shift Ave@32 and the weighted average without anyone noticing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import yaml

from repro.errors import ReproError, unknown_name
from repro.rows import read_rows
from repro.tasks import tiny_arith

PAPER_BENCHMARKS = ("math500", "minerva_math", "olympiadbench", "aime_like")
TINY_BENCHMARKS = tuple(tiny_arith.TIERS)


@dataclass(frozen=True)
class Problem:
    benchmark: str
    problem_id: str
    problem: str
    answer: str


@cache
def sources() -> dict:
    return yaml.safe_load(resources.files(__name__.rsplit(".", 1)[0]).joinpath("benchmark_sources.yaml").read_text())


def expected_size(name: str) -> int:
    if name in TINY_BENCHMARKS:
        return int(tiny_arith.TIERS[name]["size"])
    if name in sources():
        return int(sources()[name]["problems"])
    raise unknown_name("benchmark", name, [*PAPER_BENCHMARKS, *TINY_BENCHMARKS])


def resolve(names: str, backbone_is_tiny: bool) -> list[str]:
    """`all` means the paper's four for real models and the four tiny tiers for tiny-arith."""
    if names == "all":
        return list(TINY_BENCHMARKS if backbone_is_tiny else PAPER_BENCHMARKS)
    out = [n.strip() for n in names.split(",") if n.strip()]
    for name in out:
        expected_size(name)
    return out


def _answer(value) -> str:
    if isinstance(value, list):  # OlympiadBench stores final answers as a one-element list
        value = value[0] if len(value) == 1 else ", ".join(map(str, value))
    return str(value).strip()


def _from_rows(name: str, rows: list[dict], mapping: dict, offset: int = 0) -> list[Problem]:
    out = []
    for i, row in enumerate(rows):
        if "prompt" in row and "reward_model" in row:  # verl row format
            messages = list(row["prompt"])
            problem = next(m["content"] for m in messages if m["role"] == "user")
            answer = row["reward_model"]["ground_truth"]
            pid = (row.get("extra_info") or {}).get("index", i)
        else:
            try:
                problem, answer = row[mapping.get("problem", "problem")], row[mapping.get("answer", "answer")]
            except KeyError as exc:
                raise ReproError(f"{name}: rows lack field {exc}; expected {mapping}") from None
            pid = row.get(mapping.get("id", "id"), i)
        out.append(Problem(name, f"{offset + i}:{pid}" if offset else str(pid), str(problem), _answer(answer)))
    return out


def load(name: str, local_file: Path | None = None) -> list[Problem]:
    """The problems of one benchmark, size-checked."""
    size = expected_size(name)
    if name in TINY_BENCHMARKS and local_file is None:
        local_file = tiny_arith.ensure_data(0)[name]
    if local_file is not None:
        spec = (sources().get(name) or {}).get("sources", [{}])[0]
        problems = _from_rows(name, read_rows(Path(local_file), "benchmark file"), spec)
    else:
        problems = []
        for spec in sources()[name]["sources"]:
            problems += _from_rows(name, _hub_rows(name, spec), spec, offset=len(problems))
    ids = [p.problem_id for p in problems]
    if len(set(ids)) != len(ids):
        problems = [Problem(p.benchmark, str(i), p.problem, p.answer) for i, p in enumerate(problems)]
    if len(problems) != size:
        raise ReproError(f"{name} has {len(problems)} problems, expected {size}; check the file or the Hub copy")
    return problems


def _hub_rows(name: str, spec: dict) -> list[dict]:
    try:
        from datasets import load_dataset

        data = load_dataset(spec["hf"], spec.get("config"), split=spec.get("split", "test"))
        return [dict(row) for row in data]
    except Exception as exc:
        raise ReproError(
            f"cannot load {name} ({spec['hf']}) from the Hugging Face Hub ({type(exc).__name__}); "
            f"save it as JSONL/Parquet elsewhere and pass --benchmark-file {name}=PATH"
        ) from exc
