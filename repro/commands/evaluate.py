"""`repro eval`: Ave@k per benchmark, the weighted average and pass@k, for a run or a model folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

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


def _write_marker(tgt, seed: int) -> None:
    """The model run folder's marker (what `repro collect` reads); refuses to mix two models' records."""
    import json

    from repro.atomic import write_text
    from repro.evaluation.runner import MODEL_EVAL_MARKER

    path = tgt.out_dir.parent / MODEL_EVAL_MARKER
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except ValueError:
            old = {}
        if (old.get("key"), old.get("weights")) != (tgt.marker["key"], tgt.marker["weights"]):
            raise ReproError(
                f"{path.parent} holds the evaluation of {old.get('key')!r} from {old.get('weights')!r}, not of "
                f"{tgt.marker['weights']!r}; move that folder aside or pass another --runs-root"
            )
    write_text(path, json.dumps({**tgt.marker, "eval_seed": seed}, indent=2) + "\n")


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
    all_checkpoints: Annotated[
        bool, typer.Option("--all-checkpoints", help="Evaluate every kept checkpoint of a run.")
    ] = False,
    backend: Annotated[str, typer.Option("--backend", help="auto, transformers (CPU) or vllm (GPU).")] = "auto",
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", help="Default: 4096 (paper); the tiny model's own cap.")
    ] = None,
    benchmark_file: Annotated[
        list[str] | None, typer.Option("--benchmark-file", help="NAME=PATH: read a benchmark from JSONL/Parquet.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed.")] = 0,
    timeout: Annotated[float, typer.Option("--grading-timeout", help="Seconds per verification (hard).")] = 5.0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where records go (default: RUN/eval/..., MODEL/eval, or RUNS_ROOT/NAME/eval for a catalog "
            "name; with --out a catalog name's results are not a model run folder that `repro collect` reads).",
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

    Examples:

      repro eval runs/tiny-arith__seq-balance__standard__s0

      repro eval runs/tiny-arith__grpo-n4__standard__s0 --all-checkpoints --k 8

      repro eval qwen2.5-math-1.5b-balance-easy             # the released checkpoint, from the Hub

      repro eval qwen2.5-math-7b --model-path /models/Qwen2.5-Math-7B   # the base model, a local copy

      repro eval /models/Qwen2.5-Math-1.5B --benchmarks math500 --benchmark-file math500=math500.jsonl
    """
    from repro import catalog
    from repro.evaluation import benchmarks as bench
    from repro.evaluation.generation import DEFAULT_TEMPLATE
    from repro.evaluation.grading import Grader, benchmark_grading
    from repro.evaluation.runner import evaluate_benchmark, summarise, targets, write_summary
    from repro.prompting import template_for

    try:
        ks = sorted({int(x) for x in pass_k.split(",") if x.strip()})
    except ValueError as exc:
        raise ReproError(f"--pass-k takes comma-separated integers, got {pass_k!r}") from exc
    if grading not in GRADING_POLICIES:
        raise ReproError(f"unknown --grading {grading!r}; valid: {', '.join(GRADING_POLICIES)}")
    files = _benchmark_files(benchmark_file or [])
    found = targets(target, all_checkpoints, out, runs_root=runs_root, model_path=model_path)
    names = bench.resolve(benchmarks, found[0].tiny)
    err = stderr_console()
    loaded = {name: bench.load_benchmark(name, files.get(name)) for name in names}
    for name, item in loaded.items():
        if item.failed:
            err.print(
                f"[yellow]{name}[/yellow]: {'; '.join(item.failed)} did not load; using {' + '.join(item.datasets)}",
                highlight=False,
                soft_wrap=True,
            )
    problems = {name: item.problems for name, item in loaded.items()}
    for tgt in found:
        chosen = backend
        if chosen == "auto":
            import torch

            chosen = "vllm" if (torch.cuda.is_available() and not tgt.tiny) else "transformers"
        tokens = max_new_tokens or (16 if tgt.tiny else 4096)
        if tgt.backbone is not None:
            template = template_for(tgt.backbone)
        else:
            template = catalog.prompt_template("tiny" if tgt.tiny else DEFAULT_TEMPLATE)
        if tgt.marker is not None:  # before loading: a clash with another model's records fails fast
            _write_marker(tgt, seed)
        asked = [p.problem for items in problems.values() for p in items]  # vLLM's context fits the longest
        generator = _load(chosen, tgt.model_path, tokens, template, asked)
        total = sum(len(p) for p in problems.values()) * k
        by_bench: dict[str, list[dict]] = {}
        with (
            Grader(timeout_s=timeout) as grader,
            progress_bar(err) as progress,
        ):
            task = progress.add_task(f"eval {tgt.label} (problems x samples)", total=total)
            for name, items in problems.items():
                by_bench[name] = evaluate_benchmark(
                    items,
                    k,
                    generator,
                    grader,
                    tgt.out_dir / f"{name}.jsonl",
                    seed,
                    on_problems=lambda count, task=task: progress.advance(task, count * k),
                    grading=benchmark_grading(name) if grading == "released" else "boxed",
                )
            summary = summarise(by_bench, k, ks, tgt.tiny, dict(grader.counts()))
        summary["model"] = str(tgt.model_path)
        summary["sources"] = {name: item.summary() for name, item in loaded.items()}
        summary["generation"] = {"backend": chosen, "max_new_tokens": tokens, "prompt_template": template.key}
        summary["grading_policy"] = grading
        if getattr(generator, "max_model_len", None) is not None:
            summary["generation"]["max_model_len"] = generator.max_model_len
            summary["generation"]["max_model_len_reason"] = getattr(generator, "max_model_len_reason", None)
        path = write_summary(tgt.out_dir, summary)
        _print(summary, tgt.label, ks, k, path)


def _load(backend: str, model_path, tokens: int, template, asked: list[str]):
    """The generator, or one line naming the folder when its files do not load (a torn config.json, a
    truncated safetensors file): transformers and safetensors would otherwise end the command in a traceback."""
    from repro.evaluation.generation import make_generator

    try:
        return make_generator(backend, model_path, tokens, template, problems=asked)
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
