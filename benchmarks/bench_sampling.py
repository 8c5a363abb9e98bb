"""Bookkeeping cost of the sampling core for one step: 512 prompts, pools up to 32.

Rewards are drawn before the clock starts, so the figures are the core's own time: planning, recording
rewards, exit decisions, downsampling, baselines, advantages and metrics. Two drivers are timed: the
vectorised synchronous rounds (`observe_many`, what the simulator and CPU trainer use) and a streaming
driver that reports every response on its own (`observe`, the worst case for a server client).

    python benchmarks/bench_sampling.py [--prompts 512] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from repro import catalog
from repro.sampling import StepSampler, make_estimator


def pregenerated(prompts: int, cap: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.26, 0.73, size=prompts)
    return (rng.random((prompts, 64 * cap)) < p[:, None]).astype(float)


def time_sync(method: str, prompts: int, repeats: int) -> float:
    spec = catalog.get_method(method).sampler_spec()
    estimator = make_estimator(spec) if spec.kind == "est" else None
    times = []
    for rep in range(repeats):
        table = pregenerated(prompts * (12 if spec.kind == "dapo" else 1), spec.pool_cap, rep)
        cursor = np.zeros(table.shape[0], dtype=np.int64)
        start = time.perf_counter()
        sampler = StepSampler(spec, list(range(prompts)), rng=rep, estimator=estimator)
        next_id = prompts
        while True:
            wanted = sampler.prompts_wanted()
            if wanted:
                sampler.add_prompts(list(range(next_id, next_id + wanted)))
                next_id += wanted
            slots, counts = sampler.plan()
            if slots.size == 0:
                break
            ids = np.asarray(sampler.prompt_ids)[slots]
            cols = cursor[ids][:, None] + np.arange(counts.max())[None, :]
            sampler.observe_many(slots, table[ids[:, None], cols])
            cursor[ids] += counts
        sampler.finalize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_streaming(method: str, prompts: int, repeats: int) -> tuple[float, int]:
    spec = catalog.get_method(method).sampler_spec()
    times, responses = [], 0
    for rep in range(repeats):
        table = pregenerated(prompts, spec.pool_cap, rep)
        start = time.perf_counter()
        sampler = StepSampler(spec, list(range(prompts)), rng=rep)
        queue = [(s, sampler.request(s)) for s in range(prompts)]
        cursor = np.zeros(prompts, dtype=np.int64)
        while queue:
            slot, count = queue.pop()
            for r in table[slot, cursor[slot] : cursor[slot] + count]:
                sampler.observe(slot, r)
            cursor[slot] += count
            nxt = sampler.request(slot)
            if nxt:
                queue.append((slot, nxt))
        result = sampler.finalize()
        times.append(time.perf_counter() - start)
        responses = int(result.pool_size.sum())
    return statistics.median(times), responses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print(f"sampling-core bookkeeping per step, {args.prompts} prompts, median of {args.repeats} repeats")
    print(f"{'method':<20}{'sync rounds (ms)':>18}")
    for method in catalog.methods():
        print(f"{method:<20}{time_sync(method, args.prompts, args.repeats) * 1e3:>18.2f}")
    for method in ("seq-balance-stream", "seq-pos-stream"):
        seconds, responses = time_streaming(method, args.prompts, max(3, args.repeats // 5))
        print(
            f"{method:<20} per-response observe(): {seconds * 1e3:.1f} ms for {responses} responses "
            f"({seconds / responses * 1e6:.1f} us each)"
        )


if __name__ == "__main__":
    main()
