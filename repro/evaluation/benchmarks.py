"""The evaluation benchmarks: the paper's four (from the Hub or a local file), the tiny-arith tiers, and a
user's own (any other name, from its `--benchmark-file`, graded by the default mode, sized by its file).

Every loader returns the same `Problem` rows and checks the size: a benchmark that silently lost or
gained problems would shift Ave@32 and the weighted average without anyone noticing.

The Hub copies tried first are the ones the released eval script loads (benchmark_sources.yaml), so a
measured number compares with the paper's on the same problems; the public originals are fallbacks for
when that copy cannot be loaded, and `load_benchmark` says which one was used so the summary records it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from repro.errors import ReproError, unknown_name
from repro.prompting import last_user_turn
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


@dataclass(frozen=True)
class Loaded:
    """One benchmark's problems and where they came from (written into the eval summary)."""

    problems: list[Problem]
    origin: str  # "hub", "file" or "tiny-arith"
    datasets: tuple[str, ...] = ()  # Hub ids joined for this benchmark, in order
    path: str | None = None  # the local file, for origin "file"
    released_copy: bool = False  # the Hub copy the released eval script loads
    failed: tuple[str, ...] = field(default=())  # "hub id (ErrorType)" of alternatives tried before this one

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"origin": self.origin}
        if self.datasets:
            out["datasets"] = list(self.datasets)
            out["released_copy"] = self.released_copy
        if self.path is not None:
            out["path"] = self.path
        if self.failed:
            out["failed_first"] = list(self.failed)
        return out


@cache
def _data() -> dict:
    text = resources.files(__name__.rsplit(".", 1)[0]).joinpath("benchmark_sources.yaml").read_text()
    return yaml.safe_load(text)


def sources() -> dict:
    """Benchmark name -> {problems, sources: [alternative, ...]} (benchmark_sources.yaml)."""
    return _data()["benchmarks"]


def generation_setting(name: str) -> Any:
    """A setting of the released eval's generation (benchmark_sources.yaml `generation`), e.g. max_model_len."""
    settings = _data()["generation"]
    if name not in settings:
        raise unknown_name("evaluation generation setting", name, settings)
    return settings[name]["value"]


def in_catalog(name: str) -> bool:
    return name in TINY_BENCHMARKS or name in sources()


def expected_size(name: str) -> int:
    if name in TINY_BENCHMARKS:
        return int(tiny_arith.TIERS[name]["size"])
    if name in sources():
        return int(sources()[name]["problems"])
    raise ReproError(
        f"{unknown_name('benchmark', name, [*PAPER_BENCHMARKS, *TINY_BENCHMARKS])}; "
        f"for your own benchmark pass its file too: --benchmark-file {name}=PATH"
    )


def resolve(names: str, backbone_is_tiny: bool, files: Mapping[str, Path] | None = None) -> list[str]:
    """`all` means the paper's four for real models and the four tiny tiers for tiny-arith. A name outside
    the catalog is a user's own benchmark when `files` gives its file (size taken from the file)."""
    files = files or {}
    if names == "all":
        return list(TINY_BENCHMARKS if backbone_is_tiny else PAPER_BENCHMARKS)
    out = [n.strip() for n in names.split(",") if n.strip()]
    for name in out:
        if name not in files:
            expected_size(name)
    return out


def alternatives(name: str) -> list[list[dict]]:
    """The benchmark's Hub alternatives in the order they are tried, each as the list of sets it joins."""
    return [list(alt["parts"]) if "parts" in alt else [alt] for alt in sources()[name]["sources"]]


def _answer(value) -> str:
    if isinstance(value, list):  # OlympiadBench stores final answers as a one-element list
        value = value[0] if len(value) == 1 else ", ".join(map(str, value))
    if isinstance(value, float) and value.is_integer():  # an integer answer read as 204.0 must grade as 204
        value = int(value)
    return str(value).strip()  # MathArena's AIME answers are integers: "204", as the gold text math-verify parses


def _from_rows(name: str, rows: list[dict], mapping: dict, offset: int = 0) -> list[Problem]:
    out = []
    for i, row in enumerate(rows):
        if "prompt" in row and "reward_model" in row:  # verl row format
            messages = list(row["prompt"])
            problem = last_user_turn(messages)
            answer = row["reward_model"]["ground_truth"]
            pid = (row.get("extra_info") or {}).get("index", i)
        else:
            try:
                problem, answer = row[mapping.get("problem", "problem")], row[mapping.get("answer", "answer")]
            except KeyError as exc:
                fields = {k: mapping[k] for k in ("problem", "answer") if k in mapping}
                raise ReproError(f"{name}: rows lack field {exc}; expected {fields}") from None
            pid = row.get(mapping.get("id", "id"), i)
        out.append(Problem(name, f"{offset + i}:{pid}" if offset else str(pid), str(problem), _answer(answer)))
    return out


def _file_mapping(name: str, rows: list[dict]) -> dict:
    """The field names of the first alternative whose problem and answer fields the file's rows have, so a
    file saved from the released copy or from a public original reads alike."""
    specs = [spec for alt in alternatives(name) for spec in alt] if name in sources() else [{}]
    first = rows[0] if rows else {}
    for spec in specs:
        if spec.get("problem", "problem") in first and spec.get("answer", "answer") in first:
            return spec
    return specs[0]


def _checked(name: str, problems: list[Problem]) -> list[Problem]:
    ids = [p.problem_id for p in problems]
    if len(set(ids)) != len(ids):
        problems = [Problem(p.benchmark, str(i), p.problem, p.answer) for i, p in enumerate(problems)]
    if not in_catalog(name):  # a user's own benchmark: its size is the file's
        if not problems:
            raise ReproError(f"{name}: the benchmark file has no problems")
        return problems
    size = expected_size(name)
    if len(problems) != size:
        raise ReproError(
            f"{name} has {len(problems)} problems, expected {size}; check the file or the Hub copy "
            f"(for a subset or another set, give it your own name: --benchmarks my-{name} "
            f"--benchmark-file my-{name}=PATH)"
        )
    return problems


def load_benchmark(name: str, local_file: Path | None = None) -> Loaded:
    """The problems of one benchmark, size-checked, with where they came from.

    A local file wins; otherwise the Hub alternatives are tried in order and the first that loads is used
    (its size is then checked: a wrong-sized copy is an error, not a reason to try the next one).
    """
    if local_file is None:
        expected_size(name)
    if name in TINY_BENCHMARKS and local_file is None:
        path = tiny_arith.ensure_data(0)[name]
        problems = _from_rows(name, read_rows(Path(path), "benchmark file"), {})
        return Loaded(_checked(name, problems), "tiny-arith", path=str(path))
    if local_file is not None:
        rows = read_rows(Path(local_file), "benchmark file")
        problems = _from_rows(name, rows, _file_mapping(name, rows))
        return Loaded(_checked(name, problems), "file", path=str(local_file))
    failed: list[str] = []
    for index, parts in enumerate(alternatives(name)):
        try:
            loaded = [(spec, hub_rows(spec)) for spec in parts]
        except Exception as exc:  # no network, a missing or renamed set: try the next alternative
            failed.append(f"{' + '.join(s['hf'] for s in parts)} ({type(exc).__name__})")
            continue
        problems: list[Problem] = []
        for spec, rows in loaded:
            problems += _from_rows(name, rows, spec, offset=len(problems))
        datasets = tuple(spec["hf"] for spec in parts)
        return Loaded(_checked(name, problems), "hub", datasets, released_copy=index == 0, failed=tuple(failed))
    raise ReproError(
        f"cannot load {name} from the Hugging Face Hub (tried {'; '.join(failed)}); "
        f"save it as JSONL/Parquet elsewhere and pass --benchmark-file {name}=PATH"
    )


def load(name: str, local_file: Path | None = None) -> list[Problem]:
    """The problems of one benchmark, size-checked (`load_benchmark` also says where they came from)."""
    return load_benchmark(name, local_file).problems


def hub_rows(spec: dict) -> list[dict]:
    """One Hub set's rows (`datasets.load_dataset`); raises whatever the Hub raises. Tests replace it."""
    from datasets import load_dataset

    data = load_dataset(spec["hf"], spec.get("config"), split=spec.get("split", "test"))
    return [dict(row) for row in data]
