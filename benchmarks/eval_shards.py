"""Responses per second of `repro eval` with 1 shard and with N shards on the same problems, measured in one run.

Each setting is a real `repro eval` process (model load, children, merge and all) writing into a throwaway
folder, so the ratio is what a user gets; absolute figures drift with machine load. By default the tiny-arith
model (built on first use) on the CPU; on a GPU node point it at a model to size the evaluation:

    python benchmarks/eval_shards.py                      # tiny-arith, CPU, 1 vs 2 shards, Ave@32 on its 4 tiers
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


def measure(model: str, out: Path, shards: int, args: argparse.Namespace) -> tuple[int, float]:
    """Responses written and seconds of one `repro eval` with `shards` shards (raises with its stderr when it
    fails). The responses are counted from the merged records, one line per response."""
    command = [sys.executable, "-m", "repro.cli", "eval", model, "--out", str(out), "--shards", str(shards)]
    command += ["--k", str(args.k), "--pass-k", "1", "--backend", args.backend, "--benchmarks", args.benchmarks]
    if args.problems:
        command += ["--first-problems", str(args.problems)]
    for item in args.benchmark_file:
        command += ["--benchmark-file", item]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    responses = sum(sum(1 for _ in path.open()) for path in out.glob("*.jsonl"))
    return responses, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model folder (default: the tiny-arith model, built on first use)")
    parser.add_argument("--backend", default="auto", help="auto, transformers or vllm")
    parser.add_argument("--shards", type=int, default=2, help="the sharded setting (compared with 1)")
    parser.add_argument("--k", type=int, default=32, help="samples per problem (the paper's Ave@32)")
    parser.add_argument("--problems", type=int, default=0, help="the first N problems of each benchmark (0: all)")
    parser.add_argument("--benchmarks", default="all", help="comma-separated benchmark names, or all")
    parser.add_argument("--benchmark-file", action="append", default=[], help="NAME=PATH, as repro eval takes it")
    args = parser.parse_args()
    if args.model is None:
        from repro.cpu_lm.model import ensure_tiny_model

        args.model = str(ensure_tiny_model())
    with tempfile.TemporaryDirectory(prefix="eval-shards-") as tmp:
        # what every `repro eval` pays before its first response (imports, model load, grader workers), so a
        # reader can tell a sharding gain from a workload too small to amortise N model loads
        one = argparse.Namespace(**{**vars(args), "k": 1, "problems": 1})
        _, fixed = measure(args.model, Path(tmp) / "fixed", 1, one)
        print(f"fixed cost of one repro eval (1 problem, k=1): {fixed:.1f} s")
        rates, net = {}, {}
        for shards in (1, args.shards):
            responses, seconds = measure(args.model, Path(tmp) / f"shards-{shards}", shards, args)
            rates[shards] = responses / seconds
            net[shards] = responses / max(seconds - fixed, 1e-9)
            print(
                f"{shards} shard(s): {responses} responses in {seconds:.1f} s = {rates[shards]:.1f} responses/s"
                f" ({net[shards]:.1f}/s after the fixed cost)"
            )
    print(
        f"ratio {args.shards} shards / 1 shard: {rates[args.shards] / rates[1]:.2f}x"
        f" ({net[args.shards] / net[1]:.2f}x after the fixed cost)"
    )


if __name__ == "__main__":
    main()
