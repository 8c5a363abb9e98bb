"""`repro eval`: Ave@k per benchmark, the weighted average and pass@k, for a run or a model folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from repro.console import progress_bar, stderr_console, stdout_console
from repro.errors import ReproError


def _benchmark_files(items: list[str]) -> dict[str, Path]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise ReproError(f"--benchmark-file takes NAME=PATH, got {item!r} (e.g. math500=/data/math500.jsonl)")
        out[name.strip()] = Path(path)
    return out


def eval_cmd(
    target: Annotated[Path, typer.Argument(help="A run folder (its final checkpoint) or a model folder.")],
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
    out: Annotated[Path | None, typer.Option("--out", help="Where records go (default: RUN/eval/...).")] = None,
) -> None:
    """Evaluate with k samples per problem (temperature 1.0, top-p 1.0) and the project's math-verify grading.

    Writes one record per response (`<eval dir>/<benchmark>.jsonl`: problem id, sample index, response,
    extracted answer, score) and `summary.json`; an interrupted evaluation resumes without regenerating
    finished problems.

    Examples:

      repro eval runs/tiny-arith__seq-balance__standard__s0

      repro eval runs/tiny-arith__grpo-n4__standard__s0 --all-checkpoints --k 8

      repro eval /models/Qwen2.5-Math-1.5B --benchmarks math500 --benchmark-file math500=math500.jsonl
    """
    from repro import catalog
    from repro.evaluation import benchmarks as bench
    from repro.evaluation.generation import DEFAULT_TEMPLATE, make_generator
    from repro.evaluation.grading import Grader
    from repro.evaluation.runner import evaluate_benchmark, summarise, targets, write_summary

    try:
        ks = sorted({int(x) for x in pass_k.split(",") if x.strip()})
    except ValueError as exc:
        raise ReproError(f"--pass-k takes comma-separated integers, got {pass_k!r}") from exc
    files = _benchmark_files(benchmark_file or [])
    found = targets(target, all_checkpoints, out)
    names = bench.resolve(benchmarks, found[0].tiny)
    problems = {name: bench.load(name, files.get(name)) for name in names}
    err = stderr_console()
    for tgt in found:
        chosen = backend
        if chosen == "auto":
            import torch

            chosen = "vllm" if (torch.cuda.is_available() and not tgt.tiny) else "transformers"
        tokens = max_new_tokens or (16 if tgt.tiny else 4096)
        template = catalog.prompt_template("tiny" if tgt.tiny else DEFAULT_TEMPLATE)
        generator = make_generator(chosen, tgt.model_path, tokens, template)
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
                )
            summary = summarise(by_bench, k, ks, tgt.tiny, dict(grader.counts()))
        summary["model"] = str(tgt.model_path)
        path = write_summary(tgt.out_dir, summary)
        _print(summary, tgt.label, ks, k, path)


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
