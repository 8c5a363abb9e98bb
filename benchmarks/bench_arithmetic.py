"""What the CPU arithmetic pin (repro.arithmetic) costs in speed: one tiny-arith training cell and its
evaluation, timed as `repro` runs them, pinned and native.

Each variant is a fresh `python -m repro.cli` process on the same prepared $REPRO_HOME (model and data built
once, before any timing): `repro run --model tiny-arith --method seq-balance --steps S` then `repro eval` of
its final checkpoint. Variants:
- pinned: AVX2 kernels, MKL_CBWR=COMPATIBLE, numpy's targets above AVX2 off, 1 thread (what every `repro` computes);
- native, 1 thread: REPRO_NATIVE_ARITHMETIC=1 with OMP_NUM_THREADS=1 (this CPU's own kernels, same threads);
- native, default threads: REPRO_NATIVE_ARITHMETIC=1 as a standalone run would use the machine (2 threads).
The ratios are what to quote: the machine is shared and absolute times drift between runs.
Then the replaced kernel alone: one AdamW step of torch.optim.AdamW and of repro.cpu_lm.adamw (its square root in
float64) on the tiny model's and on SmolLM2-135M's parameter count, in this process (pinned).

    python benchmarks/bench_arithmetic.py [--steps 10] [--batch 8] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from repro import arithmetic

VARIANTS = {
    "pinned": {},
    "native, 1 thread": {"REPRO_NATIVE_ARITHMETIC": "1", "OMP_NUM_THREADS": "1", "REPRO_TORCH_THREADS": "1"},
    "native, default threads": {"REPRO_NATIVE_ARITHMETIC": "1"},
}
# what a shell holds before `repro` pins anything: the pin's own variables and its bookkeeping, from repro.arithmetic
PINNED_NAMES = (*arithmetic.pinned_env(), arithmetic.SAVED_ENV, arithmetic.WARNED_ENV, arithmetic.opt_out_env())


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PINNED_NAMES}
    return {**env, "REPRO_HOME": str(home), **extra}


def _cli(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "repro.cli", *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def _adamw_seconds(optimizer_cls, sizes: list[int], steps: int = 5) -> float:
    """Best of `steps` optimizer steps over parameters of `sizes` elements (gradients fixed)."""
    import torch

    params = [torch.nn.Parameter(torch.randn(n)) for n in sizes]
    for p in params:
        p.grad = torch.randn(p.numel()) / p.numel() ** 0.5
    opt = optimizer_cls(params, lr=1e-3, weight_decay=0.01)
    best = float("inf")
    for _ in range(steps):
        start = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - start)
    return best


def optimizer_cost() -> None:
    import torch

    from repro.cpu_lm.adamw import AdamW

    torch.set_num_threads(arithmetic.threads(1))
    shapes = {  # parameter tensors by size: the tiny model (~0.1M) and SmolLM2-135M (embedding + 30 layers)
        "tiny-arith (0.1M)": [32 * 64] + [64 * 64] * 8 + [64 * 128] * 6,
        "SmolLM2-135M": [49152 * 576] + [576 * 576 * 2 + 576 * 192 * 2 + 576 * 1536 * 3] * 30,
    }
    print(f"{'AdamW step':<22} {'torch s':>9} {'repro s':>9} {'repro vs torch':>15}")
    for name, sizes in shapes.items():
        theirs, ours = _adamw_seconds(torch.optim.AdamW, sizes), _adamw_seconds(AdamW, sizes)
        print(f"{name:<22} {theirs:9.4f} {ours:9.4f} {ours / theirs:14.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    # $REPRO_HOME's model and data when it has them (runs go to a temporary folder), else a fresh home
    given = os.environ.get("REPRO_HOME")
    home = Path(given) if given else Path(tempfile.mkdtemp(prefix="bench_arith_"))
    scratch = Path(tempfile.mkdtemp(prefix="bench_arith_runs_"))
    try:
        prepare = _env(home, {})
        # the model and data, built once (pinned) so every variant trains the same starting weights' file
        subprocess.run(
            [sys.executable, "-c", "import repro.cli; from repro.cpu_lm.weights import ensure_built; "
             "from repro import catalog; from repro.tasks.tiny_arith import ensure_data; "
             "ensure_data(0); ensure_built(catalog.get_backbone('tiny-arith'))"],
            env=prepare, check=True,
        )  # fmt: skip
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
        for repeat in range(args.repeats):
            for name, extra in VARIANTS.items():
                runs = scratch / f"runs-{repeat}-{len(times[name])}-{name.replace(' ', '_').replace(',', '')}"
                env = _env(home, extra)
                train = _cli(["run", "--model", "tiny-arith", "--method", "seq-balance", "--steps", str(args.steps),
                              "--batch", str(args.batch), "--runs-root", str(runs)], env)  # fmt: skip
                run = runs / "tiny-arith__seq-balance__standard__s0"
                evaluate = _cli(["eval", str(run), "--benchmarks", "tiny-math500", "--k", "4", "--pass-k", "1"], env)
                times[name].append((train, evaluate))
        base_train = min(t for t, _ in times["pinned"])
        base_eval = min(e for _, e in times["pinned"])
        print(f"tiny-arith seq-balance, {args.steps} steps of {args.batch} prompts, then Ave@4 on tiny-math500; "
              f"best of {args.repeats}, seconds of the whole `repro` process")  # fmt: skip
        print(f"{'variant':<26} {'train s':>8} {'eval s':>8} {'train vs pinned':>16} {'eval vs pinned':>15}")
        for name, pairs in times.items():
            train, evaluate = min(t for t, _ in pairs), min(e for _, e in pairs)
            print(f"{name:<26} {train:8.1f} {evaluate:8.1f} {train / base_train:15.2f}x {evaluate / base_eval:14.2f}x")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not given:
            shutil.rmtree(home, ignore_errors=True)
    optimizer_cost()


if __name__ == "__main__":
    main()
