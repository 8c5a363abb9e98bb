"""`repro eval`: sample k responses per problem, grade them, write one record per response, summarise.

Records (`<eval dir>/<benchmark>.jsonl`: problem id, sample index, response, extracted answer, score,
grading outcome, grading mode) are appended problem by problem, so scores can be recomputed without regenerating, and
an interrupted evaluation resumes where it stopped: problems that already have all k records are
skipped, a torn last line is ignored and regenerated.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from repro.atomic import append_lines, drop_torn_tail, write_text
from repro.errors import ReproError
from repro.evaluation import benchmarks as bench
from repro.evaluation.extract import check_mode, extract
from repro.model_files import WEIGHT_FILES, missing_weights  # noqa: F401  re-exported: eval and its tests
from repro.rundir.pause import pause_at

# A "model run folder" (<runs root>/<key>/) holds the evaluation of a model named from the catalog: this
# marker file (kind, key, backbone, prompt set, weights) and eval/ (records + summary.json). `repro collect`
# reads it into the eval table as its own row beside the paper's, not as a training run.
MODEL_EVAL_MARKER = "model_eval.json"
RELEASED_CHECKPOINT = "released-checkpoint"
BASE_MODEL = "base-model"


@dataclass(frozen=True)
class EvalTarget:
    model_path: Path | str  # a folder, or a Hub id that the generator loads
    out_dir: Path
    label: str
    tiny: bool
    backbone: str | None = None  # when known (runs, catalog names): picks the backbone's prompt template
    marker: dict | None = None  # for a catalog name: what MODEL_EVAL_MARKER records, written beside out_dir
    step: int | None = None  # a run's checkpoint step (a sharded eval's children are told exactly this one)
    root: Path | None = None  # the eval root its lock guards (RUN/eval for a run's checkpoints), else out_dir

    @property
    def lock_root(self) -> Path:
        """Where `repro eval`'s lock lives: one per run (every checkpoint's records sit under RUN/eval), one
        per model or catalog name otherwise."""
        return self.root if self.root is not None else self.out_dir


def _kept(folder: Path) -> bool:
    """False for a checkpoint verl dropped: its checkpoint manager deletes the actor/ folder of all but the
    last `max_actor_ckpt_to_keep` and leaves global_step_<k>/data.pt (the dataloader state) behind. True for
    a save the plugin slimmed (repro.rundir.slim): it keeps actor/huggingface, its weights in bf16."""
    return any((folder / name).exists() for name in ("model", "actor", "config.json"))


def _checkpoint_model(folder: Path) -> Path | None:
    for candidate in (folder / "model", folder / "actor" / "huggingface", folder):
        if (candidate / "config.json").exists():
            return candidate
    return None


def _weights_fix(model: Path) -> str:
    """The fix for a checkpoint without Hugging Face weights: verl's own merger of its FSDP shards."""
    actor = model.parent
    if model.name == "huggingface" and any(actor.glob("model_world_size_*_rank_*.pt")):
        return (
            "verl saved only its FSDP shards (hf_model was not in actor.checkpoint.save_contents); merge them with "
            f"`python -m verl.model_merger merge --backend fsdp --local_dir {actor} --target_dir {model}` and "
            "evaluate again"
        )
    return "copy the model's weight files into it, or point repro eval at a complete model folder"


def _require_weights(model: Path) -> None:
    problem = missing_weights(model)
    if problem is not None:
        raise ReproError(f"{model} {problem}; {_weights_fix(model)}")


MODEL_EVALS = "model-evals"  # under the runs root: evaluations of model folders named by path


def model_eval_dir(model: Path, runs_root: Path) -> Path:
    """Where `repro eval MODEL_FOLDER` writes: under the runs root, never into the model folder, which it
    was only asked to read (on a cluster often read-only, or shared between users). The folder's name and a
    hash of its absolute path keep two models of the same name apart."""
    resolved = str(Path(model).resolve())
    digest = hashlib.sha256(resolved.encode()).hexdigest()[:8]
    return Path(runs_root) / MODEL_EVALS / f"{Path(model).name}-{digest}"


def _build_record(path: Path) -> dict:
    try:
        return json.loads((path / "repro_build.json").read_text())
    except (OSError, ValueError):
        return {}


def _built_backbone(path: Path) -> str | None:
    """The backbone a model folder this project built is (its repro_build.json), else None."""
    from repro import catalog

    record = _build_record(path)
    key = record.get("backbone") or ("tiny-arith" if "spec" in record else None)
    return key if key in catalog.backbones() else None


def tiny_task(backbone: str | None) -> bool:
    """A backbone evaluated on tiny-arith's tiers (`--benchmarks all`) with the CPU defaults."""
    from repro import catalog

    return backbone is not None and catalog.get_backbone(backbone).task == "tiny-arith"


def _built_tiny(path: Path) -> bool:
    """A model folder this project built for a tiny-arith-task backbone (its build record says which)."""
    return tiny_task(_built_backbone(path))


def _run_backbone(path: Path, config: dict) -> str | None:
    """A run's backbone: the cell its config.yaml was written for (repro.cell), else the folder name's first
    field when that is a catalog backbone (a folder whose config names no cell, or one no longer resolvable)."""
    from repro import catalog
    from repro.cell import ResolvedCell

    try:
        return ResolvedCell.from_config(config).backbone.key
    except (ReproError, KeyError, TypeError, ValueError):
        backbone = path.name.split("__")[0] if "__" in path.name else None
        return backbone if backbone in catalog.backbones() else None


def _named(name: str, runs_root: Path, out: Path | None, model_path: Path | None) -> EvalTarget | None:
    """A released checkpoint (catalog key or Hub id) or a base model (backbone key or Hub id), or None.

    Weights come from `model_path` when given (a local copy: no Hub here), else from the Hub id's snapshot in
    the Hugging Face cache when it is there (repro.weights_cache; a node without the Hub), else the Hub id;
    the tiny-arith backbone has no Hub id and is built locally. Results go to <runs root>/<key>/eval.
    """
    from repro import catalog

    released = {c.key: c for c in catalog.checkpoints().values()} | {c.hf_id: c for c in catalog.checkpoints().values()}
    bases = {b.key: b for b in catalog.backbones().values()} | {
        b.hf_id: b for b in catalog.backbones().values() if b.hf_id
    }
    if name in released:
        ckpt = released[name]
        key, hub_id, backbone = ckpt.key, ckpt.hf_id, ckpt.backbone
        marker = {"kind": RELEASED_CHECKPOINT, "key": key, "hf_id": hub_id, "backbone": backbone}
        marker |= {"method": ckpt.method, "prompt_set": ckpt.prompt_set, "table1_row": ckpt.table1_row}
    elif name in bases:
        base = bases[name]
        key, hub_id, backbone = base.key, base.hf_id, base.key
        marker = {"kind": BASE_MODEL, "key": key, "hf_id": hub_id, "backbone": backbone}
        marker |= {"method": None, "prompt_set": None, "table1_row": None}
    else:
        return None
    if model_path is not None:
        model_path = Path(model_path)
        if not (model_path / "config.json").is_file():
            raise ReproError(f"--model-path {model_path} holds no config.json; pass the folder of a Hugging Face model")
        _require_weights(model_path)
        weights: Path | str = model_path
    elif hub_id is not None:
        weights = hub_id
    elif catalog.get_backbone(backbone).weights_from_user:
        raise ReproError(f"{backbone} has no weights of its own; pass your model's folder with --model-path DIR")
    else:  # a CPU backbone: nothing to download from the Hub, built on first use
        from repro.cpu_lm.weights import backbone_weights

        weights = backbone_weights(catalog.get_backbone(backbone))
    marker["weights"] = str(weights)  # names the model: the Hub id, wherever its copy sits
    if hub_id is not None and model_path is None:  # its cached snapshot, so a node without the Hub loads it
        from repro.weights_cache import local_weights

        weights = local_weights(hub_id)
    tiny = tiny_task(backbone)
    out_dir = out or Path(runs_root) / key / "eval"
    return EvalTarget(weights, out_dir, key, tiny, backbone, None if out is not None else marker)


CHECKPOINT_CHOICES = ("final", "all")


def parse_checkpoints(spec: str | None, all_checkpoints: bool = False) -> str | list[int]:
    """`--checkpoints` as "final", "all" or a sorted list of steps; `--all-checkpoints` is the alias of
    "all" and cannot be combined with another choice."""
    if spec is None:
        return "all" if all_checkpoints else "final"
    spec = spec.strip()
    if all_checkpoints and spec != "all":
        raise ReproError(f"--all-checkpoints means --checkpoints all; drop one of it and --checkpoints {spec}")
    if spec in CHECKPOINT_CHOICES:
        return spec
    try:
        steps = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError:
        steps = []
    if not steps or any(s < 0 for s in steps):
        raise ReproError(f"--checkpoints takes final, all or comma-separated steps (e.g. 100,200), got {spec!r}")
    return steps


def _chosen_steps(path: Path, kept: list[int], choice: str | list[int]) -> list[int]:
    if choice == "final":
        return [kept[-1]]
    if choice == "all":
        return kept
    absent = [s for s in choice if s not in kept]
    if absent:
        raise ReproError(
            f"{path} has no kept checkpoint at step {', '.join(map(str, absent))}; "
            f"kept steps: {', '.join(map(str, kept))}"
        )
    return list(choice)


def targets(
    path: Path | str,
    all_checkpoints: bool = False,
    out: Path | None = None,
    *,
    runs_root: Path = Path("runs"),
    model_path: Path | None = None,
    checkpoints: str | None = None,
) -> list[EvalTarget]:
    """A run folder (its checkpoints chosen by `checkpoints`: final, all or a list of steps; see
    `parse_checkpoints`), a model folder, or a catalog name.

    A name is a released checkpoint (catalog key or Hub id) or a base model (backbone key or Hub id); an
    existing run or model folder of the same name wins, so today's paths mean what they meant. A list of
    steps names one run's checkpoints, so it is refused for any other target.
    """
    choice = parse_checkpoints(checkpoints, all_checkpoints)
    path = Path(path)
    is_run, is_model = (path / "status.json").exists(), (path / "config.json").exists()
    if model_path is not None and (is_run or is_model):
        raise ReproError(
            f"--model-path gives the weights of a model named from the catalog; {path} is a folder already, "
            "drop --model-path"
        )
    if is_run:
        from repro.rundir import RunDir

        run = RunDir(path)
        config = run.config()
        backbone = _run_backbone(path, config)
        tiny = "tiny-arith" in path.name or tiny_task(backbone)
        steps = sorted(
            int(p.name.removeprefix("global_step_"))
            for p in (path / "checkpoints").glob("global_step_*")
            if p.name.removeprefix("global_step_").isdigit() and _kept(p)
        )
        if not steps:
            raise ReproError(f"{path} has no checkpoints yet; train it first (`repro run ...`)")
        chosen = _chosen_steps(path, steps, choice)
        out_root = out or path / "eval"
        found = []
        for step in chosen:
            model = _checkpoint_model(path / "checkpoints" / f"global_step_{step}")
            if model is None:
                raise ReproError(
                    f"checkpoint global_step_{step} of {path} holds no Hugging Face model folder (config.json); "
                    "it is not a checkpoint repro eval can read: evaluate another step or the run's final one"
                )
            _require_weights(model)
            out_dir = out_root / f"global_step_{step}"
            found.append(EvalTarget(model, out_dir, f"step {step}", tiny, backbone, step=step, root=out_root))
        return found
    if isinstance(choice, list):
        raise ReproError(
            f"--checkpoints {','.join(map(str, choice))} picks checkpoints of a run folder (status.json); "
            f"{path} is not one: drop --checkpoints"
        )
    if is_model:
        _require_weights(path)
        tiny = _built_tiny(path)
        return [EvalTarget(path, out or model_eval_dir(path, runs_root), path.name, tiny, _built_backbone(path))]
    named = _named(str(path), runs_root, out, model_path)
    if named is not None:
        return [named]
    if path.is_dir():
        raise ReproError(f"{path} is neither a run folder (status.json) nor a model folder (config.json)")
    from repro import catalog

    names = [*catalog.checkpoints(), *catalog.backbones()]
    raise ReproError(
        f"unknown model {str(path)!r}: not a folder, a released checkpoint or a backbone; "
        f"valid names: {', '.join(names)} (or their Hub ids; `repro models` lists them)"
    )


def read_records(path: Path) -> tuple[list[dict], int]:
    """Valid records and the number of unreadable lines (a torn tail after a kill, typically)."""
    if not path.exists():
        return [], 0
    good, bad = [], 0
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            if {"problem_id", "sample_index", "score"} <= set(record):
                good.append(record)
                continue
        except json.JSONDecodeError:
            pass
        bad += 1
    return good, bad


def complete_problems(records: Iterable[dict], k: int) -> set[str]:
    """Ids of the problems that have records of all samples 0 .. k-1 (what a resumed evaluation skips)."""
    by_problem: dict[str, set[int]] = {}
    for r in records:
        by_problem.setdefault(str(r["problem_id"]), set()).add(int(r["sample_index"]))
    return {pid for pid, samples in by_problem.items() if samples >= set(range(k))}


def evaluate_benchmark(
    problems: list[bench.Problem],
    k: int,
    generator,
    grader,
    out_file: Path,
    seed: int,
    chunk: int = 16,
    on_problems: Callable[[int], None] | None = None,
    grading: str = "boxed",
) -> list[dict]:
    """Sample, grade under mode `grading` (repro.evaluation.grading.GRADING_MODES) and append records.

    Kept records graded under another mode (or before modes were recorded) are re-graded from their saved
    responses, without regenerating, and the file is rewritten: a benchmark's records share one mode."""
    from repro.evaluation.generation import generate_with_seeds, sample_seeds

    check_mode(grading)
    records, _ = read_records(out_file)
    done = complete_problems(records, k)
    records = [r for r in records if str(r["problem_id"]) in done]  # partial problems are redone whole
    todo = [p for p in problems if p.problem_id not in done]
    if any(r.get("grading") != grading for r in records):
        records = _regrade(records, {p.problem_id: p.answer for p in problems}, grader, grading, out_file)
    if on_problems and len(problems) - len(todo):
        on_problems(len(problems) - len(todo))
    out_file.parent.mkdir(parents=True, exist_ok=True)
    drop_torn_tail(out_file)
    with open(out_file, "a") as handle:
        for start in range(0, len(todo), chunk):
            batch = todo[start : start + chunk]
            seeds = [sample_seeds(seed, p.benchmark, p.problem_id, k) for p in batch]  # chunking-independent
            texts = generate_with_seeds(generator, [p.problem for p in batch], seeds, seed * 1_000_003 + start)
            pairs = [(t, p.answer) for p, group in zip(batch, texts, strict=True) for t in group]
            grades = grader.grade_many(pairs, mode=grading)
            lines = []
            for i, (problem, group) in enumerate(zip(batch, texts, strict=True)):
                for j, text in enumerate(group):
                    g = grades[i * k + j]
                    record = {
                        "benchmark": problem.benchmark,
                        "problem_id": problem.problem_id,
                        "sample_index": j,
                        "response": text,
                        "extracted": extract(text, grading),
                        "score": g.score,
                        "outcome": g.outcome,
                        "grading": grading,
                    }
                    records.append(record)
                    lines.append(json.dumps(record))
            append_lines(handle, lines)
            pause_at(out_file.parent, "eval")  # a rehearsal's moment: records written, the evaluation not done
            if on_problems:
                on_problems(len(batch))
    return records


def _regrade(records: list[dict], answers: dict[str, str], grader, grading: str, out_file: Path) -> list[dict]:
    """`records` graded again under `grading` from their responses, the file rewritten atomically; records of
    problems no longer in the benchmark are dropped (they have no reference to grade against)."""
    records = [r for r in records if str(r["problem_id"]) in answers]
    pairs = [(str(r.get("response", "")), answers[str(r["problem_id"])]) for r in records]
    grades = grader.grade_many(pairs, mode=grading)
    regraded = [
        {**r, "extracted": extract(text, grading), "score": g.score, "outcome": g.outcome, "grading": grading}
        for r, (text, _), g in zip(records, pairs, grades, strict=True)
    ]
    write_text(out_file, "".join(json.dumps(r) + "\n" for r in regraded))
    return regraded


def summarise(
    records_by_benchmark: dict[str, list[dict]],
    k: int,
    pass_ks: Iterable[int],
    tiny: bool,
    grading_counts: dict[str, int],
) -> dict:
    from repro.evaluation.metrics import summarize

    sizes = {
        name: bench.expected_size(name) if bench.in_catalog(name) else len({r["problem_id"] for r in records})
        for name, records in records_by_benchmark.items()
    }  # a user's own benchmark weighs what was evaluated of it
    flat = [r for records in records_by_benchmark.values() for r in records]
    summary = summarize(flat, ks=[x for x in pass_ks if x <= k], sizes=sizes)
    summary["k"] = k
    summary["grading"] = dict(grading_counts)
    modes = {name: _mode_of(records) for name, records in records_by_benchmark.items()}
    summary["grading_modes"] = modes  # which released grading each benchmark's scores follow
    for name, mode in modes.items():
        if name in summary["benchmarks"]:
            summary["benchmarks"][name]["grading"] = mode
    summary["weights"] = sizes
    return summary


def write_summary(out_dir: Path, summary: dict) -> Path:
    return write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")


def _mode_of(records: list[dict]) -> str | None:
    """The grading mode of a benchmark's records ("mixed" if they disagree, None if there are none)."""
    modes = {r.get("grading", "unrecorded") for r in records}
    return None if not modes else modes.pop() if len(modes) == 1 else "mixed"
