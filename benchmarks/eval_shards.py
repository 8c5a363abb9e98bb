"""Responses per second of `repro eval` with 1 shard and with N shards on the same problems, measured in one run.

Each setting is a real `repro eval` process (model load, children, merge and all) writing into a throwaway
folder, so the ratio is what a user gets; absolute figures drift with machine load. By default the tiny-arith
model (built on first use) on the CPU; on a GPU node point it at a model to size the evaluation:

    python benchmarks/eval_shards.py                                  # tiny-arith, CPU, 1 vs 2 shards
    python benchmarks/eval_shards.py --k 8 --problems 40
    python benchmarks/eval_shards.py --backend vllm --model /models/Qwen2.5-Math-1.5B --shards 8 \\
        --benchmarks math500 --benchmark-file math500=math500.jsonl --problems 100 --k 8
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(model: str, out: Path, shards: int, args: argparse.Namespace) -> float:
    """Seconds of one `repro eval` with `shards` shards (raises with its stderr when it fails)."""
    command = [sys.executable, "-m", "repro.cli", "eval", model, "--out", str(out), "--shards", str(shards)]
    command += ["--k", str(args.k), "--pass-k", "1", "--backend", args.backend, "--benchmarks", args.benchmarks]
    command += ["--first-problems", str(args.problems)]
    for item in args.benchmark_file:
        command += ["--benchmark-file", item]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model folder (default: the tiny-arith model, built on first use)")
    parser.add_argument("--backend", default="auto", help="auto, transformers or vllm")
    parser.add_argument("--shards", type=int, default=2, help="the sharded setting (compared with 1)")
    parser.add_argument("--k", type=int, default=8, help="samples per problem")
    parser.add_argument("--problems", type=int, default=46, help="the first N problems of each benchmark")
    parser.add_argument("--benchmarks", default=None, help="default: tiny-aime,tiny-minerva (tiny), all otherwise")
    parser.add_argument("--benchmark-file", action="append", default=[], help="NAME=PATH, as repro eval takes it")
    args = parser.parse_args()
    if args.model is None:
        from repro.local.model import ensure_tiny_model

        args.model = str(ensure_tiny_model())
    if args.benchmarks is None:
        args.benchmarks = "tiny-aime,tiny-minerva" if (Path(args.model) / "repro_build.json").exists() else "all"
    n_bench = len(args.benchmarks.split(",")) if args.benchmarks != "all" else 4
    responses = n_bench * args.problems * args.k  # an upper bound when a benchmark has fewer problems
    with tempfile.TemporaryDirectory(prefix="eval-shards-") as tmp:
        rates = {}
        for shards in (1, args.shards):
            seconds = measure(args.model, Path(tmp) / f"shards-{shards}", shards, args)
            rates[shards] = responses / seconds
            print(f"{shards} shard(s): {responses} responses in {seconds:.1f} s = {rates[shards]:.1f} responses/s")
    print(f"ratio {args.shards} shards / 1 shard: {rates[args.shards] / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
