"""Seconds per training step of every method on the CPU path, as ratios to GRPO-n4, measured in one run.

Each method trains the cached tiny-arith model for a few steps in a throwaway run folder (same process,
same model, same data), so the ratios compare like with like; absolute seconds drift with machine load.

    python benchmarks/bench_cpu_methods.py [--steps 8] [--methods grpo-n4,seq-balance,...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from repro import catalog, reward
from repro.cell_config import build_cpu_config
from repro.cpu_lm.model import TinyModelSpec, ensure_tiny_model, model_folder
from repro.local.trainer import CpuTrainer
from repro.rundir import RunDir
from repro.tasks.tiny_arith import data_folder, ensure_data


def measure(method: str, steps: int, root: Path) -> dict[str, float]:
    reward.clear_cache()  # methods share seeds, hence responses: a warm cache would flatter later ones
    config = build_cpu_config("tiny-arith", method, "standard", 0, steps, None)
    config.model["path"] = str(model_folder(TinyModelSpec()))
    config.data["folder"] = str(data_folder(0))
    rundir = RunDir.prepare(root / method, config.to_dict(), ["bench", method])
    records: list[dict] = []
    trainer = CpuTrainer(config, rundir, on_step=lambda _step, m: records.append(m))
    trainer.fit(rundir.begin_attempt(launcher="bench"))
    rundir.end_attempt("finished")
    later = records[1:] or records  # the first step pays one-off warm-up costs
    return {
        "step": statistics.median(r["timing_s/step"] for r in later),
        "gen": statistics.median(r["timing_s/gen"] for r in later),
        "update": statistics.median(r["timing_s/update_actor"] for r in later),
        "responses": statistics.mean(r["sampler/responses_total"] for r in records),
        "zero_var": statistics.mean(r["sampler/zero_variance_frac"] for r in records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--methods", default=",".join(catalog.methods()))
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",")]
    if "grpo-n4" not in methods:
        methods.insert(0, "grpo-n4")
    ensure_data(0)
    ensure_tiny_model()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in methods:
            results[method] = measure(method, args.steps, Path(tmp))
            print(f"measured {method}", file=sys.stderr)
    base = results["grpo-n4"]["step"]
    print(f"CPU path, tiny-arith, {args.steps} steps per method, median seconds per step (first step excluded)")
    print(f"{'method':<20}{'s/step':>8}{'x grpo-n4':>11}{'gen s':>8}{'update s':>10}{'responses':>11}{'zero-var':>10}")
    for method, r in results.items():
        print(
            f"{method:<20}{r['step']:>8.3f}{r['step'] / base:>11.2f}{r['gen']:>8.3f}{r['update']:>10.3f}"
            f"{r['responses']:>11.0f}{r['zero_var']:>10.2f}"
        )


if __name__ == "__main__":
    main()
