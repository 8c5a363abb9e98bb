"""Streaming against synchronous Seq: the cost model at paper scale, and a timed run through the plugin.

1. `repro simulate cost` at its defaults (Qwen2.5-Math-1.5B on 8xH100, pass rates fitted to the paper's
   1.5B statistics): every method's step time relative to GRPO-n4 beside the paper's Table 2, and how
   far streaming Seq-balance's generation is from the token-throughput bound.
2. The same question measured: the plugin's rollout driver (`repro.verl_plugin.ada_loop`, synchronous
   and streaming Seq-balance, one after the other, same seed and pass rates) against `FakeLLMServer`
   served by the cost model's engine in scaled real time; wall-clock per step, and the model's
   prediction for the same parameters. Two server sizes: one that the step's requests oversubscribe
   (the paper's regime) and one with room for every request at once (where barriers cost most).

    python benchmarks/bench_streaming.py            # ~1.5 minutes on 2 cores
    python benchmarks/bench_streaming.py --quick    # smaller steps, ~30 s
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from repro import catalog
from repro.simulate import pass_rates as pr
from repro.simulate.cost import LengthModel, TrainModel, add_ratios, simulate_cost
from repro.simulate.engine import ServerModel
from repro.simulate.measure import measure_pair

PAPER = {"seq-pos": 2.2, "seq-balance": 2.8, "est": 1.3}


def model_at_paper_scale(steps: int) -> None:
    rates = pr.from_pass_at_k(0.265, 0.813, 256).dataset(16384, np.random.default_rng(0))
    rows = []
    for name in ("grpo-n4", "seq-pos", "seq-balance", "est", "seq-pos-stream", "seq-balance-stream"):
        spec = catalog.get_method(name).sampler_spec(seed=0)
        rows.append(
            simulate_cost(
                name, spec, rates, server=ServerModel(), lengths=LengthModel(), train=TrainModel(), steps=steps,
                batch=512, seed=0,
            )
        )  # fmt: skip
    add_ratios(rows)
    print(f"cost model, paper scale (512 prompts, 8 x 256 slots, {steps} steps):")
    print("  method              gen s  step s  ratio (paper)  tokens/peak s  chain s  gen/bound  full  drain s")
    for r in rows:
        paper = f"({PAPER[r.method]})" if r.method in PAPER else ""
        print(
            f"  {r.method:18s} {r.generation_s:6.1f} {r.step_s:7.1f} {r.ratio_to_grpo_n4:6.2f} {paper:7s}"
            f" {r.lower_bound_s:13.1f} {r.critical_path_s:8.1f} {r.generation_over_bound:10.2f}"
            f" {r.full_share:5.2f} {r.drain_s:8.1f}"
        )
    by = {r.method: r for r in rows}
    for kind in ("seq-pos", "seq-balance"):
        sync, stream = by[kind], by[f"{kind}-stream"]
        print(
            f"  {kind}: streaming saves {100 * (1 - stream.generation_s / sync.generation_s):.1f}% of generation, "
            f"{100 * (1 - stream.step_s / sync.step_s):.1f}% of the step"
        )


def measured(prompts: int, capacity: int, scale: float, label: str) -> None:
    rates = pr.from_pass_at_k(0.265, 0.813, 256).dataset(4096, np.random.default_rng(0))
    spec = catalog.get_method("seq-balance").sampler_spec(seed=0)
    server = ServerModel(replicas=1, capacity=capacity)
    started = time.perf_counter()
    sync, stream = measure_pair(
        spec, rates, list(range(prompts)), server=server, lengths=LengthModel(), scale=scale, seed=0, step=0
    )
    ratio_measured = sync.wall_s / stream.wall_s
    ratio_model = sync.predicted_s / stream.predicted_s
    print(
        f"plugin, {label}: {prompts} prompts, 1 x {capacity} slots, {sync.responses} responses per variant "
        f"(identical pools: {np.array_equal(sync.pool_sizes, stream.pool_sizes)})"
    )
    print(f"  sync   : measured {sync.wall_s:6.2f} s   model {sync.predicted_s:6.2f} s")
    print(f"  stream : measured {stream.wall_s:6.2f} s   model {stream.predicted_s:6.2f} s")
    print(
        f"  sync/stream: measured {ratio_measured:.3f}, model {ratio_model:.3f} "
        f"(difference {100 * (ratio_measured / ratio_model - 1):+.1f}%)   [{time.perf_counter() - started:.0f} s]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    model_at_paper_scale(steps=1 if args.quick else 4)
    print()
    prompts = 64 if args.quick else 128
    measured(prompts, capacity=64, scale=0.02, label="oversubscribed server")
    measured(prompts, capacity=prompts * 8, scale=0.02, label="room for every request")


if __name__ == "__main__":
    main()
