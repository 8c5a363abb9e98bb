"""`repro data filter`: build a backbone's training set the way the paper did."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from repro import catalog
from repro.commands.options import Backend
from repro.console import progress_bar, stderr_console, stdout_console
from repro.errors import ReproError

app = typer.Typer(
    help="Training data: filter prompts by the base model's pass rate.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def prompt_set_for(pass_rate: float) -> str:
    for name, entry in catalog.prompt_sets().items():
        if abs(entry.pass_rate - pass_rate) < 1e-9:
            return name
    return f"pass{pass_rate:g}"


@app.command("filter")
def filter_cmd(
    model: Annotated[
        str, typer.Option("--model", help="Base model whose pass rates decide (see `repro models`).")
    ] = "tiny-arith",
    base_samples: Annotated[int, typer.Option("--base-samples", min=1, help="Samples per prompt.")] = 16,
    pass_rate: Annotated[
        float, typer.Option("--pass-rate", help="Keep 0 < pass rate <= this: 0.3125 standard, 0.125 hard.")
    ] = 0.3125,
    source: Annotated[str, typer.Option("--source", help="openr1 (default for real models) or tiny-arith.")] = "",
    input_file: Annotated[
        Path | None,
        typer.Option(
            "--input",
            help="Local JSONL/Parquet (problem, answer[, solution]), a released pre-filtered verl Parquet, "
            "or a released set's Hub id (e.g. RLHFlow/reinforce_ada_hard_prompt).",
        ),
    ] = None,
    val_size: Annotated[int, typer.Option("--val-size", min=0, help="Prompts held out for validation.")] = 200,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Only the first N candidates (trial runs).")
    ] = None,
    backend: Backend = "auto",
    seed: Annotated[int, typer.Option("--seed", help="Sampling and split seed.")] = 0,
    out: Annotated[Path | None, typer.Option("--out", help="Default: $REPRO_HOME/data/MODEL-PROMPT_SET.")] = None,
) -> None:
    """Sample the base model `--base-samples` times per prompt and keep 0 < pass rate <= `--pass-rate`.

    Writes `train.parquet`, `val.parquet` (verl format), `samples.jsonl` (per-prompt correct counts; a rerun
    resumes from it) and `summary.json` (counts at each stage, pass-count histogram) into the output folder,
    which `repro run` then reads for that backbone and prompt set.

    Examples:

      repro data filter --base-samples 16                     # tiny-arith, standard set

      repro data filter --base-samples 16 --pass-rate 0.125   # the hard set

      repro data filter --model qwen2.5-math-1.5b --input openr1_default.parquet --backend vllm

      repro data filter --model qwen2.5-math-7b --input reinforce_ada_7b_train.parquet   # a released set

      repro data filter --model qwen2.5-math-7b --pass-rate 0.125 --input RLHFlow/reinforce_ada_hard_prompt
    """
    from contextlib import ExitStack

    from repro.arithmetic import usable_cores
    from repro.data import filter as flt
    from repro.data.candidates import load_candidates
    from repro.evaluation.backends import make_generator
    from repro.evaluation.generator_pool import GeneratorPool
    from repro.paths import repro_home
    from repro.prompting import template_for

    backbone = catalog.get_backbone(model)
    if backbone.weights_from_user:
        raise ReproError(
            f"{model} has no weights to sample pass rates from; filter with a catalog backbone (repro models) and "
            f"train on its set with repro run --model {model} --model-path DIR_OR_HUB_ID --train-file PARQUET"
        )
    if not 0 < pass_rate <= 1:
        raise ReproError(f"--pass-rate must be in (0, 1], got {pass_rate}")
    source = source or backbone.task or "openr1"
    name = prompt_set_for(pass_rate)
    out_dir = out or repro_home() / "data" / f"{model}-{name}"
    template = template_for(backbone)
    started = time.perf_counter()
    rows, prefiltered = load_candidates(source, input_file, template)
    stages = {"loaded": len(rows)}
    rows = flt.dedupe(rows)
    stages["after_dedupe"] = len(rows)
    if limit:
        rows = rows[:limit]
        stages["after_limit"] = len(rows)
    err = stderr_console()
    if prefiltered:
        kept, counts = rows, {}
        stages["prefiltered_input"] = len(rows)
    else:
        rows = [r for r in rows if flt.reference_verifies(r)]
        stages["reference_verifies"] = len(rows)
        model_path = _model_path(model, backbone)
        import torch

        # auto keeps transformers on a CPU (as `repro eval` does): vllm there is a choice, --backend vllm
        chosen = backend if backend != "auto" else ("vllm" if torch.cuda.is_available() else "transformers")
        max_new = backbone.eval_max_new_tokens or 4096
        cores = usable_cores()
        with ExitStack() as stack, progress_bar(err) as progress:
            if chosen == "transformers" and cores > 1:  # one torch thread a process: a worker per core
                pool = stack.enter_context(GeneratorPool(cores, model_path, max_new, template))
                generate, generate_all = pool.generate, pool.generate_all
            else:
                generate, generate_all = make_generator(chosen, model_path, max_new, template).generate, None
            task = progress.add_task(f"sampling {model} x{base_samples} per prompt", total=len(rows))
            counts = flt.sample_pass_counts(
                rows,
                generate,
                base_samples,
                seed,
                out_dir / "samples.jsonl",
                on_done=lambda n: progress.advance(task, n),
                model=_model_identity(model, model_path),
                template=template.key,
                reuse=sorted(out_dir.parent.glob(f"{model}-*/samples.jsonl")),
                generate_all=generate_all,
            )
        limit_correct = pass_rate * base_samples
        kept = [r for r in rows if 0 < counts[r.key] <= limit_correct + 1e-9]
        stages["all_wrong_dropped"] = sum(1 for r in rows if counts[r.key] == 0)
        stages["too_easy_dropped"] = sum(1 for r in rows if counts[r.key] > limit_correct + 1e-9)
        stages["kept"] = len(kept)
    max_tokens = flt.max_prompt_tokens()
    count_tokens = flt.token_counter(_model_path(model, backbone))
    if count_tokens is None:
        err.print(f"warning: cannot load the {model} tokenizer; prompts over {max_tokens} tokens are not dropped")
    kept, stages["too_long_dropped"] = flt.drop_long(kept, max_tokens, count_tokens)
    if not kept:
        raise ReproError(f"no prompt has 0 < pass rate <= {pass_rate}; raise --pass-rate or use more prompts")
    split = flt.write_split(kept, out_dir, min(val_size, len(kept) // 10), seed, template)
    summary = {
        "model": model,
        "source": source,
        "input": str(input_file) if input_file else None,
        "prompt_template": template.key,
        "max_prompt_tokens": max_tokens if count_tokens else None,
        "base_samples": base_samples,
        "pass_rate": pass_rate,
        "prompt_set": name,
        "stages": stages,
        "split": split,
        "pass_count_histogram": flt.histogram(counts, base_samples) if counts else None,
        "seconds": round(time.perf_counter() - started, 1),
    }
    flt.write_summary(out_dir, summary)
    console = stdout_console()
    console.print(f"wrote {out_dir}: train {split['train']}, val {split['val']} ({summary['seconds']}s)")
    console.print("stages: " + ", ".join(f"{k}={v}" for k, v in stages.items()))
    if counts:
        console.print(f"correct-out-of-{base_samples} histogram: {summary['pass_count_histogram']}")


def _model_identity(model: str, model_path: Path) -> str:
    """What names the sampled weights in the pass-count log: the built folder's versioned name for tiny-arith
    (a rebuilt model must not inherit the old one's counts), the Hub id or local path otherwise."""
    built = model == "tiny-arith" or catalog.get_backbone(model).build is not None
    if built:
        return model_path.name
    from repro.weights_cache import source_of

    return source_of(str(model_path))  # a cached snapshot is named by its Hub id, as before the cache was used


def _model_path(model: str, backbone) -> Path:
    """The weights the filter samples (a seam the tests replace with a local model)."""
    from repro.cpu_lm.weights import backbone_weights

    return Path(backbone_weights(backbone))
