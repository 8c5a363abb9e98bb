"""`repro simulate cost`: what each method's sampling costs in wall-clock on a continuous-batching server.

Every method runs through the project's `StepSampler` exactly as the trainers do: synchronous rounds with
a barrier (the paper's Seq, GRPO's single round, DAPO's refill batches, Est's one allocation), or one
stream per prompt for the `-stream` variants (a prompt's next batch is issued when its previous batch
has returned, as `repro.verl_plugin.ada_loop` schedules it). Requests go to `engine.BatchingEngine`;
rewards are Bernoulli draws at each prompt's pass rate and response lengths come from `LengthModel`.

A step costs generation (until the last response of the step returns) plus training, which grows with
the tokens of the update batch. The lower bound for generation is `generated tokens / peak throughput`:
every slot of every server busy for the whole step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from repro.sampling import StepSampler, estimator_for
from repro.sampling.spec import SamplerSpec
from repro.simulate.engine import BatchingEngine, ServerModel, by_owner
from repro.simulate.workload import LengthModel, Streams, TrainModel, _Draws, _prompt_order

__all__ = [
    "LengthModel",
    "MethodCost",
    "StepCost",
    "TrainModel",
    "_Draws",
    "_prompt_order",
    "add_ratios",
    "run_step",
    "simulate_cost",
]


@dataclass
class StepCost:
    generated_tokens: float
    responses: int
    generation_s: float
    update_tokens: int
    train_s: float
    busy_share: float  # server time busy / (replicas x generation time)
    full_share: float  # share of generation time with every slot taken
    drain_s: float  # from the last queued request to the end: slots emptying one by one
    critical_path_s: float  # the longest chain of one prompt's batches, each as long as its longest response
    pool_sizes: np.ndarray = field(repr=False)
    cancelled_tokens: float = 0.0  # decoded by responses the early exit cancelled (inside generated_tokens)
    cancelled_responses: int = 0

    @property
    def step_s(self) -> float:
        return self.generation_s + self.train_s


def run_step(
    spec: SamplerSpec,
    prompt_ids: Sequence[int],
    draws: _Draws,
    server: ServerModel,
    train: TrainModel,
    *,
    step: int = 0,
    estimator=None,
    draw_prompts: Callable[[int], Sequence[int]] | None = None,
) -> StepCost:
    """One step of `spec` on a fresh (idle) server; streaming specs never wait on other prompts."""
    sampler = StepSampler(spec, list(prompt_ids), step=step, estimator=estimator)
    engine = BatchingEngine(server)
    pools: list[list[tuple[float, int]]] = [[] for _ in range(sampler.num_slots)]
    owner: list[tuple[int, float, int]] = []  # request id -> (slot, reward, length)
    waiting: dict[int, list[int]] = {}  # slot -> request ids of its outstanding batch, call order
    left: dict[int, int] = {}
    chain: dict[int, float] = {}  # slot -> tokens of its longest response per batch, summed

    slot_prompts = sampler.prompt_ids  # the property copies them: read again only when DAPO's refills add some
    cut = spec.early_exit != "off"  # a batch ends response by response (`StepSampler.returned`), cut by the rule
    cancelled = [0.0, 0]  # tokens decoded by cancelled responses, and how many

    def submit(slot: int, count: int) -> None:
        rewards, lengths = draws.next(slot_prompts[slot], count)
        if not cut:  # a cut batch adds the longest response it waited for, when it ends
            chain[slot] = chain.get(slot, 0.0) + float(lengths.max())
        ids = list(range(len(owner), len(owner) + count))
        lengths_list = lengths.tolist()
        owner.extend((slot, reward, length) for reward, length in zip(rewards.tolist(), lengths_list, strict=True))
        engine.submit_many(ids, lengths_list)
        waiting[slot], left[slot] = ids, count

    def batch_of(slot: int) -> list[tuple[float, int]]:
        return [(owner[i][1], owner[i][2]) for i in waiting.pop(slot)]

    def returned(slot: int, request_ids: list[int]) -> bool:
        """The early exit: a slot's responses back in one instant; whether its batch ended (the rest cancelled)."""
        ids = waiting[slot]
        end = sampler.returned(slot, [i - ids[0] for i in request_ids], [owner[i][1] for i in request_ids])
        if end is None:
            return False
        del waiting[slot]
        pools[slot] += [(owner[ids[k]][1], owner[ids[k]][2]) for k in end.kept.tolist()]
        back = np.setdiff1d(np.arange(len(ids)), end.cancelled)
        chain[slot] = chain.get(slot, 0.0) + max(owner[ids[k]][2] for k in back.tolist())
        if end.cancelled.size:
            stopped = engine.cancel([ids[k] for k in end.cancelled.tolist()])
            cancelled[0] += sum(owner[i][2] - tokens_left for i, tokens_left in stopped.items())
            cancelled[1] += len(stopped)
        return True

    if cut:
        if spec.streaming:
            for slot in range(sampler.num_slots):
                submit(slot, sampler.request(slot))
        while True:
            while not engine.idle:
                for slot, request_ids in by_owner(engine.step(), lambda i: owner[i][0], waiting).items():
                    if returned(slot, request_ids) and spec.streaming and (count := sampler.request(slot)):
                        submit(slot, count)
            if spec.streaming:
                break
            slots, counts = sampler.plan()  # the next round, once the undecided prompts' rounds are back
            if slots.size == 0:
                break
            for slot, count in zip(slots, counts, strict=True):
                submit(int(slot), int(count))
    elif spec.streaming:
        for slot in range(sampler.num_slots):
            submit(slot, sampler.request(slot))
        while not engine.idle:
            for request_id, _t in engine.step():
                slot = owner[request_id][0]
                left[slot] -= 1
                if left[slot] == 0:
                    batch = batch_of(slot)
                    pools[slot] += batch
                    sampler.observe(slot, np.array([r for r, _ in batch]))
                    if count := sampler.request(slot):
                        submit(slot, count)
    else:
        while True:
            if wanted := sampler.prompts_wanted():
                if draw_prompts is None:
                    raise ValueError("this method refills prompts (DAPO): pass draw_prompts")
                sampler.add_prompts(list(draw_prompts(wanted)))
                slot_prompts = sampler.prompt_ids
                pools += [[] for _ in range(sampler.num_slots - len(pools))]
            slots, counts = sampler.plan()
            if slots.size == 0:
                if sampler.prompts_wanted():  # every prompt drawn was skipped (GRESO): draw again
                    continue
                break
            for slot, count in zip(slots, counts, strict=True):
                submit(int(slot), int(count))
            engine.drain()  # the barrier: the round ends with its slowest response
            rewards = np.zeros((slots.size, int(counts.max())))
            for row, slot in enumerate(slots):
                batch = batch_of(int(slot))
                pools[int(slot)] += batch
                rewards[row, : len(batch)] = [r for r, _ in batch]
            sampler.observe_many(slots, rewards)
    result = sampler.finalize()
    kept_lengths = [pools[int(s)][int(i)][1] for s, i in zip(result.slot, result.index, strict=True)]
    update_tokens = int(sum(kept_lengths)) + len(kept_lengths) * server.prompt_tokens
    gen = engine.now
    return StepCost(
        generated_tokens=engine.tokens,
        responses=len(owner),
        generation_s=gen,
        update_tokens=update_tokens,
        train_s=train.fixed + train.per_token * update_tokens,
        busy_share=engine.busy / (server.replicas * gen) if gen > 0 else 0.0,
        full_share=engine.full / gen if gen > 0 else 0.0,
        drain_s=gen - engine.queued_until,
        critical_path_s=max(chain.values()) * server.iteration(1),
        pool_sizes=np.asarray(result.pool_size[: len(prompt_ids)]),
        cancelled_tokens=cancelled[0],
        cancelled_responses=cancelled[1],
    )


@dataclass
class MethodCost:
    method: str
    kind: str
    streaming: bool
    steps: int
    responses: float  # per step
    generated_tokens: float  # per step
    generation_s: float
    train_s: float
    step_s: float
    lower_bound_s: float  # generated tokens / peak throughput
    busy_share: float
    full_share: float
    drain_s: float
    critical_path_s: float  # a second lower bound: no schedule finishes a prompt before its chain
    ratio_to_grpo_n4: float | None = None
    seconds: float = 0.0
    # the overlapped (async) schedule (repro.simulate.overlap), None when not simulated
    async_step_s: float | None = None
    async_generation_s: float | None = None
    async_staleness_max: int | None = None
    async_staleness_mean: float | None = None
    async_ratio_to_grpo_n4: float | None = None  # over GRPO-n4's synchronous step, as the paper's ratios are
    async_steady_step_s: float | None = None  # a long run's async step (repro.simulate.overlap); None if too few
    async_steady_ratio_to_grpo_n4: float | None = None
    cancelled_tokens: float = 0.0  # per step, decoded by responses the early exit cancelled (in generated_tokens)
    cancelled_responses: float = 0.0  # per step
    tokens_ratio_to_grpo_n4: float | None = None  # generated tokens a step over GRPO-n4's: its compute in GRPO-n4 steps
    grpo_n4_steps_at_equal_tokens: int | None = None  # that ratio times a run's length (`repro simulate cost`)

    @property
    def floor_s(self) -> float:
        """No schedule on these servers beats generating the step's tokens at peak throughput, then updating
        (colocated: the servers sleep during the update)."""
        return self.lower_bound_s + self.train_s

    @property
    def generation_over_bound(self) -> float:
        return self.generation_s / self.lower_bound_s

    @property
    def generation_over_both_bounds(self) -> float:
        return self.generation_s / max(self.lower_bound_s, self.critical_path_s)

    def to_dict(self) -> dict[str, object]:
        return {
            **asdict(self),
            "generation_over_bound": self.generation_over_bound,
            "generation_over_both_bounds": self.generation_over_both_bounds,
            "floor_s": self.floor_s,
        }


def simulate_cost(
    name: str,
    spec: SamplerSpec,
    pass_rates: np.ndarray,
    *,
    server: ServerModel,
    lengths: LengthModel,
    train: TrainModel,
    steps: int,
    batch: int,
    seed: int,
    on_step: Callable[[], None] | None = None,
    overlap: bool = False,
    ahead: int = 1,
    streams: Streams | None = None,
) -> MethodCost:
    """Mean per-step cost of one method over `steps` steps; prompt order and response streams depend on
    the seed only, so every method meets the same prompts with the same responses. With `overlap`, also the
    overlapped schedule (`repro.simulate.overlap`, `ahead` steps in flight beyond the one in training).
    `streams`: a dict that the methods of one run share, so that each response stream is drawn once."""
    started = time.perf_counter()
    draw_prompts = _prompt_order(pass_rates.size, seed)

    estimator = estimator_for(spec)
    costs = []
    for step in range(steps):
        draws = _Draws(pass_rates, lengths, seed, step, streams)
        costs.append(
            run_step(
                spec,
                draw_prompts(batch),
                draws,
                server,
                train,
                step=step,
                estimator=estimator,
                draw_prompts=draw_prompts,
            )
        )
        if on_step:
            on_step()

    def mean(attr: str) -> float:
        return float(np.mean([getattr(c, attr) for c in costs]))

    tokens = mean("generated_tokens")
    async_fields: dict[str, float | int] = {}
    if overlap:
        from repro.simulate.overlap import simulate_overlap

        over = simulate_overlap(
            spec, pass_rates, server=server, lengths=lengths, train=train, steps=steps, batch=batch, seed=seed,
            draw_prompts=_prompt_order(pass_rates.size, seed), ahead=ahead,
            estimator=estimator_for(spec), streams=streams,
        )  # fmt: skip
        async_fields = {
            "async_step_s": over.step_s,
            "async_generation_s": over.generation_s,
            "async_staleness_max": over.staleness_max,
            "async_staleness_mean": over.staleness_mean,
            "async_steady_step_s": over.steady_step_s,
        }
        if on_step:
            on_step()
    return MethodCost(
        method=name,
        kind=spec.kind,
        streaming=spec.streaming,
        steps=steps,
        responses=mean("responses"),
        generated_tokens=tokens,
        generation_s=mean("generation_s"),
        train_s=mean("train_s"),
        step_s=mean("step_s"),
        lower_bound_s=tokens / server.peak_throughput,
        busy_share=mean("busy_share"),
        full_share=mean("full_share"),
        drain_s=mean("drain_s"),
        critical_path_s=mean("critical_path_s"),
        cancelled_tokens=mean("cancelled_tokens"),
        cancelled_responses=mean("cancelled_responses"),
        seconds=time.perf_counter() - started,
        **async_fields,
    )


def add_ratios(rows: list[MethodCost], reference: str = "grpo-n4") -> None:
    """Every step time over the reference method's synchronous step, the paper's Table 2 convention; and every
    step's generated tokens over the reference's (how many reference steps generate as much)."""
    ref = next((r for r in rows if r.method == reference), None)
    for row in rows:
        row.ratio_to_grpo_n4 = row.step_s / ref.step_s if ref else None
        row.tokens_ratio_to_grpo_n4 = row.generated_tokens / ref.generated_tokens if ref else None
        if row.async_step_s is not None:
            row.async_ratio_to_grpo_n4 = row.async_step_s / ref.step_s if ref else None
        if row.async_steady_step_s is not None:
            row.async_steady_ratio_to_grpo_n4 = row.async_steady_step_s / ref.step_s if ref else None
