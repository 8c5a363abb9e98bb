"""Selecting and assembling Reinforce-Ada-Seq's update batch: one gather against per-row concatenation.

A step of seq-balance leaves up to 32 responses of up to 2048 tokens for each of 512 prompts. The pool is
held padded, [prompts * 32, 2048] int64 token ids and response masks (the dtype verl uses) plus a float
reward per row, row `slot * 32 + index` for the `index`-th response of prompt `slot`. The update batch is
the 4 kept responses per prompt as padded [2048, 2048] tensors.

- selection: `StepSampler.finalize()` (downsampling, global baselines, advantages, metrics);
- vectorised: one `index_select` per tensor with the rows `slot * 32 + index` from the finalize result;
- per-row torch.cat: a Python loop over the kept rows slicing `tensor[r:r+1]`, torch.cat per prompt,
  then torch.cat over prompts (the released code's pattern with the DataProto layer taken away);
- released code with verl's DataProto (skip with --no-dataproto): the released Reinforce-Ada trainer
  (`_generate_multi_round_adaptive_downsampling`) copies every scored pool row into a single-row
  `DataProto` (`batch[[j]]`) in a per-prompt positive/negative cache, merges each prompt's kept
  fragments with `DataProto.concat`, then concatenates the prompts. Timed here: the per-row fragments
  of every drawn row, the per-prompt concat and the final concat, on the same rows `finalize` chose.

Rewards are drawn and the pool is filled before any clock starts; every figure is the median of
`--repeats` runs. Both assemblies are checked to give identical tensors.

    python benchmarks/bench_update_batch.py [--prompts 512] [--cap 32] [--length 2048] [--repeats 5] [--no-dataproto]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from repro.sampling import SamplerSpec, StepSampler

FIELDS = ("responses", "response_mask", "rewards")


def sampled_step(prompts: int, spec: SamplerSpec, seed: int) -> StepSampler:
    """A seq-balance sampler run to completion on Bernoulli rewards, not yet finalized."""
    rng = np.random.default_rng(seed)
    p = rng.beta(0.26, 0.73, size=prompts)  # pass rates skewed hard, as in bench_sampling.py

    def sample(slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return (rng.random((slots.size, int(counts.max()))) < p[slots, None]).astype(float)

    sampler = StepSampler(spec, list(range(prompts)), step=seed)
    while True:  # run_step_sync's rounds, stopping short of finalize() so that it can be timed alone
        slots, counts = sampler.plan()
        if slots.size == 0:
            return sampler
        sampler.observe_many(slots, sample(slots, counts))


def make_pool(prompts: int, cap: int, length: int, rewards: np.ndarray, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    rows = prompts * cap
    responses = torch.randint(0, 151_000, (rows, length), dtype=torch.int64, generator=gen)
    lengths = torch.randint(1, length + 1, (rows,), generator=gen)
    response_mask = (torch.arange(length)[None, :] < lengths[:, None]).to(torch.int64)
    responses.mul_(response_mask)  # pad id 0 after each response's end
    return {"responses": responses, "response_mask": response_mask, "rewards": torch.from_numpy(rewards).float()}


def vectorised(pool: dict[str, torch.Tensor], slot: np.ndarray, index: np.ndarray, cap: int) -> dict[str, torch.Tensor]:
    rows = torch.from_numpy(slot * cap + index)
    return {k: pool[k].index_select(0, rows) for k in FIELDS}


def released_style(
    pool: dict[str, torch.Tensor], slot: np.ndarray, index: np.ndarray, cap: int
) -> dict[str, torch.Tensor]:
    per_prompt: dict[int, list[dict[str, torch.Tensor]]] = {}
    for s, i in zip(slot.tolist(), index.tolist(), strict=True):
        r = s * cap + i
        per_prompt.setdefault(s, []).append({k: pool[k][r : r + 1] for k in FIELDS})
    merged = [{k: torch.cat([f[k] for f in frags]) for k in FIELDS} for frags in per_prompt.values()]
    return {k: torch.cat([m[k] for m in merged]) for k in FIELDS}


def released_dataproto(pool_dp, drawn: np.ndarray, slot: np.ndarray, index: np.ndarray, cap: int):
    """The released trainer's path: a one-row DataProto per drawn row, concat per prompt, concat overall."""
    from verl import DataProto

    cache: dict[int, list] = {}
    for s, size in enumerate(drawn.tolist()):  # every scored row is cached as it arrives
        cache[s] = [pool_dp[[s * cap + i]] for i in range(size)]
    per_prompt: dict[int, list[int]] = {}
    for s, i in zip(slot.tolist(), index.tolist(), strict=True):
        per_prompt.setdefault(s, []).append(i)
    merged = [DataProto.concat([cache[s][i] for i in kept]) for s, kept in per_prompt.items()]
    return DataProto.concat(merged)


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--cap", type=int, default=32, help="pool cap M*N (round size 8 x cap/8 rounds)")
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-dataproto", action="store_true", help="skip the verl DataProto variant")
    args = parser.parse_args()
    spec = SamplerSpec(kind="seq", exit_rule="balance", round_size=8, max_rounds=args.cap // 8, seed=args.seed)

    final_times, results = [], []
    for rep in range(args.repeats):
        sampler = sampled_step(args.prompts, spec, args.seed + rep)
        start = time.perf_counter()
        results.append(sampler.finalize())
        final_times.append(time.perf_counter() - start)
    result = results[0]  # the step assembled below: the same one whatever --repeats is
    rewards = np.zeros((args.prompts, args.cap))
    rewards[result.slot, result.index] = result.reward  # only kept rows are read; the rest is filler
    pool = make_pool(args.prompts, args.cap, args.length, rewards.reshape(-1), args.seed)
    pool_bytes = sum(t.numel() * t.element_size() for t in pool.values())

    t_vec, out_vec = timed(lambda: vectorised(pool, result.slot, result.index, args.cap), args.repeats)
    t_loop, out_loop = timed(lambda: released_style(pool, result.slot, result.index, args.cap), args.repeats)
    for k in FIELDS:
        assert torch.equal(out_vec[k], out_loop[k]), k
    t_dp = None
    if not args.no_dataproto:
        from verl import DataProto

        uid = np.repeat(np.array([f"uid-{s}" for s in range(args.prompts)], dtype=object), args.cap)
        pool_dp = DataProto.from_dict(tensors=pool, non_tensors={"uid": uid})
        t_dp, out_dp = timed(
            lambda: released_dataproto(pool_dp, result.pool_size, result.slot, result.index, args.cap),
            max(1, args.repeats // 2),
        )
        for k in FIELDS:
            assert torch.equal(out_vec[k], out_dp.batch[k]), k
        assert list(out_dp.non_tensor_batch["uid"]) == [f"uid-{s}" for s in result.slot.tolist()]
    rows = out_vec["responses"].shape[0]
    assert rows == args.prompts * spec.n and out_vec["responses"].shape[1] == args.length
    assert torch.equal(out_vec["rewards"].double(), torch.from_numpy(result.reward))

    sizes = result.pool_size
    print(f"pool: {args.prompts} prompts x {args.cap} slots x {args.length} tokens (int64 ids + int64 mask + rewards)")
    print(f"pool memory: {pool_bytes / 2**20:.1f} MiB")
    print(f"drawn responses: {int(sizes.sum())} (pool size mean {sizes.mean():.1f}, max {int(sizes.max())})")
    print(f"update batch: {tuple(out_vec['responses'].shape)} responses, {rows} kept rows")
    print(f"torch threads: {torch.get_num_threads()}")
    print(f"select (StepSampler.finalize):          {1e3 * statistics.median(final_times):9.2f} ms")
    print(f"assemble, vectorised index_select:      {1e3 * t_vec:9.2f} ms")
    print(f"assemble, per-row torch.cat loop:       {1e3 * t_loop:9.2f} ms")
    print(f"ratio per-row loop / vectorised:        {t_loop / t_vec:9.1f}x")
    if t_dp is not None:
        print(f"assemble, released code (DataProto):    {1e3 * t_dp:9.2f} ms")
        print(f"ratio released DataProto / vectorised:  {t_dp / t_vec:9.1f}x")
    total = statistics.median(final_times) + t_vec
    print(f"select + vectorised assemble:           {1e3 * total:9.2f} ms")


if __name__ == "__main__":
    main()
