"""`repro eval`: Ave@k per benchmark, the weighted average and pass@k, for a run or a model folder."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from repro import arithmetic
from repro.commands.options import Backend
from repro.console import progress_bar, stderr_console, stdout_console
from repro.errors import ReproError

GRADING_POLICIES = ("released", "math-verify")


def _benchmark_files(items: list[str]) -> dict[str, Path]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise ReproError(f"--benchmark-file takes NAME=PATH, got {item!r} (e.g. math500=/data/math500.jsonl)")
        out[name.strip()] = Path(path)
    return out


def _check_marker(tgt) -> None:
    """Refuse to mix two models' records in one model run folder, before anything is written there."""
    import json

    from repro.evaluation.runner import MODEL_EVAL_MARKER

    path = tgt.out_dir.parent / MODEL_EVAL_MARKER
    if tgt.marker is None or not path.exists():
        return
    try:
        old = json.loads(path.read_text())
    except ValueError:
        old = {}
    if (old.get("key"), old.get("weights")) != (tgt.marker["key"], tgt.marker["weights"]):
        raise ReproError(
            f"{path.parent} holds the evaluation of {old.get('key')!r} from {old.get('weights')!r}, not of "
            f"{tgt.marker['weights']!r}; move that folder aside or pass another --runs-root"
        )


def _write_marker(tgt, seed: int) -> None:
    """The model run folder's marker (what `repro collect` reads); refuses to mix two models' records."""
    import json

    from repro.atomic import write_text
    from repro.evaluation.runner import MODEL_EVAL_MARKER

    _check_marker(tgt)
    write_text(tgt.out_dir.parent / MODEL_EVAL_MARKER, json.dumps({**tgt.marker, "eval_seed": seed}, indent=2) + "\n")


def eval_cmd(
    target: Annotated[
        str,
        typer.Argument(
            help="A run folder (its final checkpoint), a model folder, a released checkpoint (catalog key or "
            "Hub id) or a base model (backbone key or Hub id); `repro models` lists the names.",
            metavar="TARGET",
            show_default=False,
        ),
    ],
    benchmarks: Annotated[
        str, typer.Option("--benchmarks", help="Comma-separated names, or 'all' (the paper's four; tiny tiers).")
    ] = "all",
    k: Annotated[int, typer.Option("--k", min=1, help="Samples per problem (Ave@k).")] = 32,
    pass_k: Annotated[str, typer.Option("--pass-k", help="pass@k values to report.")] = "1,2,4,8,16,32",
    checkpoints: Annotated[
        str | None,
        typer.Option(
            "--checkpoints",
            help="A run's kept checkpoints to evaluate: final (the highest step; default), all, or S1,S2,...",
            show_default=False,
        ),
    ] = None,
    all_checkpoints: Annotated[bool, typer.Option("--all-checkpoints", help="The same as --checkpoints all.")] = False,
    shards: Annotated[
        str,
        typer.Option(
            "--shards",
            help="Data-parallel processes, each its share of every benchmark's problems, merged at the end; "
            "auto: visible GPUs // the backbone's eval tensor-parallel size under vLLM, else 1.",
        ),
    ] = "auto",
    backend: Backend = "auto",
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", help="Default: 4096 (paper); the tiny model's own cap.")
    ] = None,
    benchmark_file: Annotated[
        list[str] | None,
        typer.Option(
            "--benchmark-file",
            help="NAME=PATH: read a benchmark from JSONL/Parquet (problem and answer fields, or verl rows). "
            "A NAME outside the catalog is your own benchmark: sized by its file, graded by the last box.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed.")] = 0,
    timeout: Annotated[float, typer.Option("--grading-timeout", help="Seconds per verification (hard).")] = 5.0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where records go (default: RUN/eval/..., RUNS_ROOT/NAME/eval for a catalog name, or "
            "RUNS_ROOT/model-evals/FOLDER-HASH for a model folder, which is only read; with --out a catalog "
            "name's results are not a model run folder that `repro collect` reads).",
        ),
    ] = None,
    model_path: Annotated[
        Path | None,
        typer.Option(
            "--model-path",
            help="For a catalog name: use the model in this local folder instead of downloading the Hub id "
            "(label, backbone, prompt template and Table 1 row still come from the catalog).",
        ),
    ] = None,
    runs_root: Annotated[
        Path,
        typer.Option("--runs-root", help="For a catalog name: results go to RUNS_ROOT/NAME/, beside the runs."),
    ] = Path("runs"),
    grading: Annotated[
        str,
        typer.Option(
            "--grading",
            help="released: as the released eval (Minerva Math with Qwen2.5-Math's grader, the others the last "
            "box with math-verify); math-verify: the last box with math-verify everywhere.",
        ),
    ] = "released",
    first_problems: Annotated[
        int | None,
        typer.Option(
            "--first-problems",
            min=1,
            hidden=True,
            help="Only the first N problems of each benchmark (sizing runs, benchmarks/eval_shards.py).",
        ),
    ] = None,
    shard: Annotated[
        str | None, typer.Option("--shard", hidden=True, help="I/N: run as child I of a sharded evaluation.")
    ] = None,
) -> None:
    """Evaluate with k samples per problem (temperature 1.0, top-p 1.0), graded as the released eval grades.

    Writes one record per response (`<eval dir>/<benchmark>.jsonl`: problem id, sample index, response,
    extracted answer, score) and `summary.json` (with the benchmark sources used); an interrupted
    evaluation resumes without regenerating finished problems. A released checkpoint or a base model
    named from the catalog is evaluated into a model run folder RUNS_ROOT/NAME/ (model_eval.json +
    eval/), which `repro collect` and `repro table weighted-average` show as its own row. Grading follows
    the released eval by default (`--grading released`): Minerva Math with Qwen2.5-Math's answer extraction
    and `math_equal`, the other benchmarks the last box with math-verify; `--grading math-verify` grades
    every benchmark the second way. Records remember their mode; a change re-grades them, never regenerates.

    `--shards N` runs N processes side by side (on GPUs, each on its own group of the backbone's eval
    tensor-parallel size; on a CPU, each with cores // N threads), each on every N-th problem of every
    benchmark (records in `<eval dir>/shards/`, logs in `shards/shard-I.log`), then merges them into the
    records and summary a single process writes: every sample has its own seed, so they are identical. A
    killed shard resumes on rerun. One `repro eval` at a time writes an eval folder (`.eval.lock`).

    Your own benchmark: name it in `--benchmarks` and give its file with `--benchmark-file NAME=PATH`. A model
    folder is only read: its records go to RUNS_ROOT/model-evals/, never into the folder.

    Examples:

      repro eval runs/tiny-arith__seq-balance__standard__s0

      repro eval runs/tiny-arith__grpo-n4__standard__s0 --checkpoints all --k 8

      repro eval runs/qwen2.5-math-1.5b__seq-balance__standard__s0 --checkpoints 100,200

      repro eval qwen2.5-math-1.5b-balance-easy             # the released checkpoint, from the Hub

      repro eval qwen2.5-math-7b --model-path /models/Qwen2.5-Math-7B   # the base model, a local copy

      repro eval /models/Qwen2.5-Math-1.5B --shards 8       # 8 vLLM replicas on 8 GPUs (auto does the same)

      repro eval runs/tiny-arith__grpo-n4__standard__s0 --shards 2   # two CPU processes

      repro eval /models/Qwen2.5-Math-1.5B --benchmarks math500 --benchmark-file math500=math500.jsonl

      repro eval /models/my-sft --benchmarks gsm8k --benchmark-file gsm8k=gsm8k_test.jsonl   # your own

      repro eval smollm2-135m-instruct --k 4        # a real 135M LLM on a CPU, built from the registry
    """
    from repro.evaluation import benchmarks as bench
    from repro.evaluation import shards as sharding
    from repro.evaluation.runner import targets, write_summary

    try:
        ks = sorted({int(x) for x in pass_k.split(",") if x.strip()})
    except ValueError as exc:
        raise ReproError(f"--pass-k takes comma-separated integers, got {pass_k!r}") from exc
    if grading not in GRADING_POLICIES:
        raise ReproError(f"unknown --grading {grading!r}; valid: {', '.join(GRADING_POLICIES)}")
    requested = sharding.parse_shards(shards)
    position = sharding.parse_shard(shard) if shard is not None else None
    files = _benchmark_files(benchmark_file or [])
    found = targets(target, all_checkpoints, out, runs_root=runs_root, model_path=model_path, checkpoints=checkpoints)
    names = bench.resolve(benchmarks, found[0].tiny, files)
    err = stderr_console()
    loaded = {name: bench.load_benchmark(name, files.get(name)) for name in names}
    if position is None:
        for name, item in loaded.items():
            if item.failed:
                err.print(
                    f"[yellow]{name}[/yellow]: {'; '.join(item.failed)} did not load; "
                    f"using {' + '.join(item.datasets)}",
                    highlight=False,
                    soft_wrap=True,
                )
    problems = {name: item.problems[:first_problems] for name, item in loaded.items()}
    settings = _Settings(k, seed, grading, max_new_tokens, first_problems)
    if position is not None:  # a child of a sharded evaluation: its share, no lock (the parent holds it)
        sharding.exit_with_parent()
        for tgt in found:
            _evaluate_share(tgt, problems, settings, _plan(backend, tgt, max_new_tokens), timeout, *position)
        return
    plan = _plan(backend, found[0], max_new_tokens)
    count = sharding.shard_count(requested, plan.engine, plan.tp, sharding.visible_gpus() if plan.gpu else [])
    for tgt in found:
        _check_marker(tgt)  # before the lock creates the eval folder: a clash writes nothing
    passthrough = _passthrough(
        benchmarks, k, pass_k, backend, max_new_tokens, benchmark_file, seed, timeout, out, model_path, runs_root
    )
    with sharding.eval_lock(found[0].lock_root):
        for tgt in found:
            plan = _plan(backend, tgt, max_new_tokens)
            if tgt.marker is not None:  # before loading: a clash with another model's records fails fast
                _write_marker(tgt, seed)
            if count > 1:
                args = [target, *passthrough, "--grading", grading]
                args += ["--checkpoints", str(tgt.step)] if tgt.step is not None else []
                args += ["--first-problems", str(first_problems)] if first_problems else []
                summary = _evaluate_sharded(tgt, problems, settings, plan, count, args, timeout, ks, err)
            else:
                summary = _evaluate_single(tgt, problems, settings, plan, timeout, ks, err)
            summary["model"] = str(tgt.model_path)
            summary["sources"] = {name: item.summary() for name, item in loaded.items()}
            summary["grading_policy"] = grading
            path = write_summary(tgt.out_dir, summary)
            _print(summary, tgt.label, ks, k, path)


@dataclass(frozen=True)
class _Settings:
    """What every process of one evaluation samples and grades with."""

    k: int
    seed: int
    grading: str
    max_new_tokens: int | None
    first_problems: int | None

    def mode(self, benchmark: str) -> str:
        from repro.evaluation.grading import benchmark_grading

        return benchmark_grading(benchmark) if self.grading == "released" else "boxed"


@dataclass(frozen=True)
class _Plan:
    """How one target is generated: backend, token cap, prompt template and GPUs per vLLM replica."""

    backend: str
    tokens: int
    template: Any
    tp: int

    @property
    def gpu(self) -> bool:
        """vLLM on GPUs (not PyPI's CPU build): shards take GPU groups, the summary records GPUs per shard."""
        from repro.evaluation.generation import vllm_device

        return self.backend == "vllm" and vllm_device() == "gpu"

    @property
    def engine(self) -> str:
        """What a shard's process runs, as repro.evaluation.shards splits machines: `vllm` (a group of GPUs),
        `vllm-cpu` (its own cores, its engine's OpenMP threads bound to them) or `transformers` (its cores)."""
        if self.backend == "vllm" and not self.gpu:
            return "vllm-cpu"
        return self.backend

    def generation(self, generator=None) -> dict:
        out = {"backend": self.backend, "max_new_tokens": self.tokens, "prompt_template": self.template.key}
        if getattr(generator, "max_model_len", None) is not None:
            out["max_model_len"] = generator.max_model_len
            out["max_model_len_reason"] = getattr(generator, "max_model_len_reason", None)
        return out


def _plan(backend: str, tgt, max_new_tokens: int | None) -> _Plan:
    from repro import catalog
    from repro.evaluation.generation import DEFAULT_TEMPLATE
    from repro.prompting import template_for

    chosen = backend
    if chosen == "auto":
        import torch

        # on a CPU, auto stays with transformers even where the vllm-cpu build is installed: its engine start
        # (about 30 s on 2 cores) is more than a CPU evaluation's decoding gains back (SmolLM2-135M, 64 and
        # 256 responses: transformers 30 s and 108 s end to end, vLLM 45 s and 154 s; bench_eval_backends.py)
        cpu = tgt.tiny or (tgt.backbone is not None and catalog.get_backbone(tgt.backbone).device == "cpu")
        chosen = "vllm" if (torch.cuda.is_available() and not cpu) else "transformers"
    listed = catalog.get_backbone(tgt.backbone).eval_max_new_tokens if tgt.backbone is not None else None
    tokens = max_new_tokens or listed or (16 if tgt.tiny else 4096)
    if tgt.backbone is not None:
        template = template_for(tgt.backbone)
        tp = catalog.get_backbone(tgt.backbone).eval_tensor_parallel_size
    else:
        template = catalog.prompt_template("tiny" if tgt.tiny else DEFAULT_TEMPLATE)
        tp = 1
    return _Plan(chosen, tokens, template, tp)


def _passthrough(
    benchmarks, k, pass_k, backend, max_new_tokens, benchmark_file, seed, timeout, out, model_path, runs_root
):
    """The options a sharded evaluation's children get, as the parent was given them."""
    args = ["--benchmarks", benchmarks, "--k", str(k), "--pass-k", pass_k, "--backend", backend, "--seed", str(seed)]
    args += ["--grading-timeout", str(timeout), "--runs-root", str(runs_root)]
    args += ["--max-new-tokens", str(max_new_tokens)] if max_new_tokens else []
    for item in benchmark_file or []:
        args += ["--benchmark-file", item]
    args += ["--out", str(out)] if out is not None else []
    args += ["--model-path", str(model_path)] if model_path is not None else []
    return args


def _asked(problems: dict) -> list[str]:
    """Every problem text of the evaluation (vLLM's context fits the longest, in every shard alike)."""
    return [p.problem for items in problems.values() for p in items]


def _evaluate_single(tgt, problems: dict, settings: _Settings, plan: _Plan, timeout: float, ks, err) -> dict:
    """One process: the generator loaded here, every benchmark in turn, records appended problem by problem."""
    from repro.evaluation import shards as sharding
    from repro.evaluation.grading import Grader
    from repro.evaluation.runner import evaluate_benchmark, summarise

    for name, items in problems.items():  # what a killed sharded run finished is not generated again
        main_file = tgt.out_dir / f"{name}.jsonl"
        sharding.fold(items, settings.k, main_file, sharding.shard_record_files(tgt.out_dir, name))
    generator = _load(plan.backend, tgt.model_path, plan.tokens, plan.template, _asked(problems), plan.tp)
    k = settings.k
    total = sum(len(p) for p in problems.values()) * k
    by_bench: dict[str, list[dict]] = {}
    with Grader(timeout_s=timeout) as grader, progress_bar(err) as progress:
        task = progress.add_task(f"eval {tgt.label} (problems x samples)", total=total)
        for name, items in problems.items():
            by_bench[name] = evaluate_benchmark(
                items,
                k,
                generator,
                grader,
                tgt.out_dir / f"{name}.jsonl",
                settings.seed,
                on_problems=lambda count, task=task: progress.advance(task, count * k),
                grading=settings.mode(name),
            )
        summary = summarise(by_bench, k, ks, tgt.tiny, dict(grader.counts()))
    summary["generation"] = _generation(plan.generation(generator), settings)
    return summary


def _generation(generation: dict, settings: _Settings) -> dict:
    if settings.first_problems:
        generation["first_problems"] = settings.first_problems  # a sizing run: not the whole benchmark
    return generation


class _NothingToGenerate:
    """The generator of a process with nothing left to generate: a call means records went missing."""

    def generate(self, problems, n: int, seed: int) -> list[list[str]]:
        raise ReproError(f"{len(problems)} problem(s) have no records after every shard finished; rerun to resume")


def _evaluate_share(
    tgt, problems: dict, settings: _Settings, plan: _Plan, timeout: float, index: int, count: int
) -> None:
    """A child: its share of every benchmark that the merged records lack, into its own shard files; then
    its grading counts and generation facts for the parent's summary. No model is loaded when the share is
    already complete (a vLLM start costs a minute)."""
    from repro.evaluation import shards as sharding
    from repro.evaluation.grading import Grader
    from repro.evaluation.runner import complete_problems, evaluate_benchmark, read_records

    if plan.backend == "transformers" and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        import torch

        torch.set_num_threads(arithmetic.threads(max(1, int(os.environ["OMP_NUM_THREADS"]))))
    k = settings.k
    todo: dict[str, list] = {}
    pending = 0
    for name, items in problems.items():
        merged = complete_problems(read_records(tgt.out_dir / f"{name}.jsonl")[0], k)
        todo[name] = [p for p in sharding.share(items, index, count) if p.problem_id not in merged]
        mine = complete_problems(read_records(sharding.record_file(tgt.out_dir, name, index, count))[0], k)
        pending += sum(p.problem_id not in mine for p in todo[name])
    generator = (
        _load(plan.backend, tgt.model_path, plan.tokens, plan.template, _asked(problems), plan.tp)
        if pending
        else _NothingToGenerate()
    )
    with Grader(timeout_s=timeout) as grader:
        for name, items in todo.items():
            evaluate_benchmark(
                items,
                k,
                generator,
                grader,
                sharding.record_file(tgt.out_dir, name, index, count),
                settings.seed,
                grading=settings.mode(name),
            )
        counts = dict(grader.counts())
    meta = {"shard": index, "shards": count, "problems_generated": pending, "grading_counts": counts}
    sharding.write_meta(tgt.out_dir, index, count, meta | {"generation": plan.generation(generator)})


def _evaluate_sharded(
    tgt, problems: dict, settings: _Settings, plan: _Plan, count: int, args: list[str], timeout: float, ks, err
) -> dict:
    """N children, each its share (`_evaluate_share`), then their records folded into `<benchmark>.jsonl`
    and the summary a single process writes, its grading counts the children's summed."""
    from repro.evaluation import shards as sharding
    from repro.evaluation.grading import Grader
    from repro.evaluation.runner import complete_problems, evaluate_benchmark, read_records, summarise

    k = settings.k
    main = {name: tgt.out_dir / f"{name}.jsonl" for name in problems}
    for name, items in problems.items():  # a killed run's finished problems, whatever its N, are kept
        sharding.fold(items, k, main[name], sharding.shard_record_files(tgt.out_dir, name))
    sharding.remove_metas(tgt.out_dir)
    already = sum(
        len(complete_problems(read_records(main[name])[0], k) & {p.problem_id for p in items})
        for name, items in problems.items()
    )
    counter = sharding.LineCounter(
        [sharding.record_file(tgt.out_dir, name, i, count) for name in problems for i in range(count)]
    )
    gpus = sharding.visible_gpus() if plan.gpu else []
    total = sum(len(p) for p in problems.values()) * k
    with progress_bar(err) as progress:
        task = progress.add_task(f"eval {tgt.label} ({count} shards, problems x samples)", total=total)
        sharding.run_children(
            [sharding.child_command(args, i, count) for i in range(count)],
            [sharding.child_env(i, count, plan.tp, gpus, plan.engine) for i in range(count)],
            [sharding.log_file(tgt.out_dir, i) for i in range(count)],
            f"{tgt.label} ({tgt.out_dir})",
            on_poll=lambda: progress.update(task, completed=min(total, already * k + counter.total())),
        )
    metas = sharding.read_metas(tgt.out_dir, count)
    by_bench: dict[str, list[dict]] = {}
    with Grader(timeout_s=timeout) as grader:
        for name, items in problems.items():
            missing = sharding.fold(items, k, main[name], sharding.shard_record_files(tgt.out_dir, name))
            if missing:
                raise ReproError(
                    f"{name}: {len(missing)} problem(s) (first {missing[0]!r}) have no {k} records after every "
                    f"shard finished; see the logs in {tgt.out_dir / sharding.SHARDS_DIR} and rerun to resume"
                )
            # nothing is generated here; records graded under another mode are re-graded, as a single run does
            by_bench[name] = evaluate_benchmark(
                items, k, _NothingToGenerate(), grader, main[name], settings.seed, grading=settings.mode(name)
            )
        counts = Counter(dict(grader.counts()))
    for meta in metas:
        counts.update(meta.get("grading_counts", {}))
    sharding.remove_metas(tgt.out_dir)
    summary = summarise(by_bench, k, ks, tgt.tiny, dict(counts))
    generation = plan.generation()
    for meta in metas:  # vLLM's context, as the children computed it (the same in each: same problems)
        for key in ("max_model_len", "max_model_len_reason"):
            if key in meta.get("generation", {}):
                generation[key] = meta["generation"][key]
    generation["shards"] = count
    if plan.gpu:
        generation["gpus_per_shard"] = plan.tp
    summary["generation"] = _generation(generation, settings)
    return summary


def _load(backend: str, model_path, tokens: int, template, asked: list[str], tp: int = 1):
    """The generator, or one line naming the folder when its files do not load (a torn config.json, a
    truncated safetensors file): transformers and safetensors would otherwise end the command in a traceback."""
    from repro.evaluation.generation import make_generator

    try:
        return make_generator(backend, model_path, tokens, template, problems=asked, tensor_parallel_size=tp)
    except ReproError:
        raise
    except Exception as exc:
        reason = " ".join(str(exc).split())[:240] or type(exc).__name__
        raise ReproError(
            f"cannot load the model in {model_path} ({type(exc).__name__}: {reason}); check that the folder is a "
            "complete Hugging Face model (config.json, tokenizer files, weights) or evaluate another checkpoint"
        ) from exc


def _print(summary: dict, label: str, ks: list[int], k: int, path: Path) -> None:
    table = Table(title=f"{label}: Ave@{k} and pass@k (%)", caption=f"records and summary in {path.parent}")
    shown = [x for x in ks if x <= k]
    for col in ("benchmark", "problems", f"Ave@{k}", *(f"pass@{x}" for x in shown)):
        table.add_column(col, justify="left" if col == "benchmark" else "right")
    for name, row in summary["benchmarks"].items():
        passes = {int(key): value for key, value in row["pass_at_k"].items()}
        table.add_row(
            name,
            str(row["problems"]),
            f"{100 * row['ave_at_k']:.1f}",
            *(f"{100 * passes[x]:.1f}" if x in passes else "—" for x in shown),
        )
    table.add_row("weighted average", "", f"{100 * summary['weighted_average']:.1f}", *([""] * len(shown)))
    console = stdout_console()
    console.print(table)
    grading = summary.get("grading", {})
    console.print("grading outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(grading.items())))
