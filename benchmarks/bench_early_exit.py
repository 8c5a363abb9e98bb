"""Seq's early exit at paper scale (issue 46): how much of Seq-balance's step the order-preserving exit saves,
against the goal of 2.0x GRPO-n4's step, and where the rest of the time goes.

1. The cost model at `repro simulate cost`'s defaults (Qwen2.5-Math-1.5B on 8xH100, pass rates fitted to the
   paper's 1.5B statistics): tokens and step time of Seq-pos/Seq-balance with and without the exit, synchronous,
   streamed and overlapped (async), beside the first-returned cut (biased) and the token floor.
2. Where the responses go, from the exact pool law (`repro.simulate.exact`): the share drawn by prompts whose
   rule never holds (no exit can cut them), and what a one-at-a-time sampler would draw instead of rounds.
3. What would reach the goal: the same method with fewer rounds (a cap of 16 instead of 32 per prompt), which
   changes what the method finds on hard prompts, so it is a different method, not a cheaper schedule.

    python benchmarks/bench_early_exit.py            # ~3 minutes on 2 cores
    python benchmarks/bench_early_exit.py --steps 1  # ~1 minute
"""

from __future__ import annotations

import argparse

import numpy as np

from repro import catalog
from repro.simulate import pass_rates as pr
from repro.simulate.cost import LengthModel, TrainModel, add_ratios, simulate_cost
from repro.simulate.engine import ServerModel
from repro.simulate.exact import seq_exact, sequential_mean_draws

GOAL = 2.0  # issue 46: Seq-balance at or below 2.0x GRPO-n4's step
METHODS = ("grpo-n4", "seq-pos", "seq-pos-exit", "seq-balance", "seq-balance-exit", "seq-balance-stream",
           "seq-balance-exit-stream", "seq-balance-exit-first")  # fmt: skip
WHAT_WOULD = {"seq-balance, 2 rounds": ("seq-balance", {"max_rounds": 2}),
              "seq-balance-exit, 2 rounds": ("seq-balance-exit", {"max_rounds": 2})}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    rates = pr.from_pass_at_k(0.265, 0.813, 256).dataset(16384, np.random.default_rng(0))
    specs = {name: catalog.get_method(name).sampler_spec(seed=0) for name in METHODS}
    for label, (name, changes) in WHAT_WOULD.items():
        specs[label] = catalog.get_method(name).sampler_spec(seed=0, **changes)
    rows, streams = [], {}
    for name, spec in specs.items():
        rows.append(
            simulate_cost(
                name, spec, rates, server=ServerModel(), lengths=LengthModel(), train=TrainModel(), steps=args.steps,
                batch=512, seed=0, overlap=True, ahead=2, streams=streams,
            )
        )  # fmt: skip
    add_ratios(rows)
    by = {r.method: r for r in rows}
    floor = by["seq-balance"].floor_s / by["grpo-n4"].step_s
    print(f"1. cost model, paper scale (512 prompts, 8 x 256 slots, {args.steps} steps); goal: Seq-balance <= {GOAL}x")
    print("  method                        tokens/step  cut tokens  x GRPO-n4 tokens  sync x  async x  floor x")
    for r in rows:
        print(
            f"  {r.method:29s} {r.generated_tokens / 1e6:9.2f}M {r.cancelled_tokens / 1e6:9.3f}M"
            f" {r.tokens_ratio_to_grpo_n4:17.2f} {r.ratio_to_grpo_n4:7.2f} {r.async_ratio_to_grpo_n4:8.2f}"
            f" {r.floor_s / by['grpo-n4'].step_s:8.2f}"
        )
    for kind in ("seq-pos", "seq-balance"):
        off, cut = by[kind], by[f"{kind}-exit"]
        print(
            f"  {kind}: the exit saves {100 * (1 - cut.generated_tokens / off.generated_tokens):.1f}% of the tokens, "
            f"{100 * (1 - cut.step_s / off.step_s):.1f}% of the synchronous step, "
            f"{100 * (1 - cut.async_step_s / off.async_step_s):.1f}% of the overlapped one; the cancelled responses "
            f"had decoded {cut.cancelled_tokens / max(cut.cancelled_responses, 1):.0f} tokens each when cut"
        )
    best = min(by["seq-balance-exit"].async_ratio_to_grpo_n4, by["seq-balance-exit-stream"].ratio_to_grpo_n4)
    needed = (GOAL * by["grpo-n4"].step_s - by["seq-balance"].train_s) / by["seq-balance"].lower_bound_s
    print(
        f"  best Seq-balance schedule with the exit: {best:.2f}x (goal {GOAL}x; Seq-balance's token floor {floor:.2f}x:"
        f" no schedule reaches {GOAL}x with more than {needed:.0%} of its tokens)"
    )

    print(f"2. where Seq's responses go (exact pool law on the {rates.size:,} prompts of the fitted pass rates)")
    p = rates
    for kind in ("seq-pos", "seq-balance"):
        spec = specs[kind]
        exact = seq_exact(p, spec)
        cap = spec.round_size * spec.max_rounds
        stuck = float((exact.unresolved * cap).mean())
        one_at_a_time = float(sequential_mean_draws(p, spec).mean())
        print(
            f"  {kind}: {exact.mean_draws.mean():.2f} responses a prompt; {stuck:.2f} of them "
            f"({stuck / exact.mean_draws.mean():.0%}) by the {exact.unresolved.mean():.0%} of prompts whose rule never "
            f"holds in {cap} (no exit cuts them); a one-at-a-time sampler draws {one_at_a_time:.2f}"
        )
    would = [f"{k}: {by[k].ratio_to_grpo_n4:.2f}x sync, {by[k].async_ratio_to_grpo_n4:.2f}x async" for k in WHAT_WOULD]
    print(f"3. what would (a different method: half the cap on hard prompts): {'; '.join(would)}")


if __name__ == "__main__":
    main()
