"""`repro eval`: Ave@k per benchmark, the weighted average and pass@k, for a run or a model folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from repro.commands.evaluate_plan import _plan, _Settings
from repro.commands.evaluate_processes import _evaluate_sharded, _evaluate_share, _evaluate_single
from repro.commands.options import Backend
from repro.console import stderr_console, stdout_console
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
