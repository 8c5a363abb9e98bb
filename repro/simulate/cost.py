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
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from repro.sampling import StepSampler, make_estimator
from repro.sampling.spec import SamplerSpec
from repro.simulate.engine import BatchingEngine, ServerModel


@dataclass(frozen=True)
class LengthModel:
    """Response lengths in tokens: log-normal around a median that differs for correct and incorrect
    responses (wrong answers ramble), capped at the rollout's max_response_length (truncated ones are
    scored wrong by the reward in practice, but the cap is all the cost model needs)."""

    correct_median: float = 600.0
    incorrect_median: float = 1000.0
    sigma: float = 0.5
    max_tokens: int = 2048

    def draw(self, rng: np.random.Generator, correct: np.ndarray) -> np.ndarray:
        median = np.where(correct, self.correct_median, self.incorrect_median)
        raw = median * np.exp(self.sigma * rng.standard_normal(np.shape(correct)))
        return np.clip(np.rint(raw), 1, self.max_tokens).astype(np.int64)


@dataclass(frozen=True)
class TrainModel:
    """Update cost: old-policy log-probs, forward and backward over every token of the update batch,
    plus a fixed part (weight sync to the servers, optimizer step). Defaults put GRPO-n4 on the 1.5B
    model near the paper's 102 s/step (Table 2) with the default server."""

    per_token: float = 1.6e-5  # s per update token (prompt + response)
    fixed: float = 8.0  # s per step


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

    @property
    def step_s(self) -> float:
        return self.generation_s + self.train_s


class _Draws:
    """Reward and length of each request, drawn from a stream per prompt id and call index, so that two
    schedules of the same step see the same responses in the same per-prompt order."""

    def __init__(self, pass_rates: np.ndarray, lengths: LengthModel, seed: int, step: int) -> None:
        self.pass_rates, self.lengths, self.seed, self.step = pass_rates, lengths, seed, step
        self._calls: dict[Hashable, int] = {}
        self._cache: dict[Hashable, tuple[np.ndarray, np.ndarray]] = {}

    def next(self, prompt_id: Hashable, count: int) -> tuple[np.ndarray, np.ndarray]:
        start = self._calls.get(prompt_id, 0)
        self._calls[prompt_id] = start + count
        rewards, lengths = self._stream(prompt_id, start + count)
        return rewards[start : start + count], lengths[start : start + count]

    def peek(self, prompt_id: Hashable, index: int) -> tuple[float, int]:
        """The `index`-th response of a prompt's stream (what the emulated server needs per call)."""
        rewards, lengths = self._stream(prompt_id, index + 1)
        return float(rewards[index]), int(lengths[index])

    def _stream(self, prompt_id: Hashable, need: int) -> tuple[np.ndarray, np.ndarray]:
        have = self._cache.get(prompt_id)
        if have is None or have[0].size < need:
            size = max(64, 2 * need)
            # two generators, so that a longer stream extends a shorter one instead of replacing it
            base = [self.seed, self.step, int(prompt_id)]
            correct = np.random.default_rng([*base, 0]).random(size) < self.pass_rates[int(prompt_id)]
            have = (correct.astype(float), self.lengths.draw(np.random.default_rng([*base, 1]), correct))
            self._cache[prompt_id] = have
        return have


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

    def submit(slot: int, count: int) -> None:
        rewards, lengths = draws.next(sampler.prompt_ids[slot], count)
        chain[slot] = chain.get(slot, 0.0) + float(lengths.max())
        ids = []
        for reward, length in zip(rewards, lengths, strict=True):
            ids.append(len(owner))
            owner.append((slot, float(reward), int(length)))
            engine.submit(ids[-1], int(length))
        waiting[slot], left[slot] = ids, count

    def batch_of(slot: int) -> list[tuple[float, int]]:
        return [(owner[i][1], owner[i][2]) for i in waiting.pop(slot)]

    if spec.streaming:
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
                pools += [[] for _ in range(sampler.num_slots - len(pools))]
            slots, counts = sampler.plan()
            if slots.size == 0:
                break
            for slot, count in zip(slots, counts, strict=True):
                submit(int(slot), int(count))
            while not engine.idle:  # the barrier: the round ends with its slowest response
                engine.step()
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
) -> MethodCost:
    """Mean per-step cost of one method over `steps` steps; prompt order and response streams depend on
    the seed only, so every method meets the same prompts with the same responses. With `overlap`, also the
    overlapped schedule (`repro.simulate.overlap`, `ahead` steps in flight beyond the one in training)."""
    started = time.perf_counter()
    draw_prompts = _prompt_order(pass_rates.size, seed)

    estimator = make_estimator(spec) if spec.kind == "est" else None
    costs = []
    for step in range(steps):
        draws = _Draws(pass_rates, lengths, seed, step)
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
            estimator=make_estimator(spec) if spec.kind == "est" else None,
        )  # fmt: skip
        async_fields = {
            "async_step_s": over.step_s,
            "async_generation_s": over.generation_s,
            "async_staleness_max": over.staleness_max,
            "async_staleness_mean": over.staleness_mean,
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
        seconds=time.perf_counter() - started,
        **async_fields,
    )


def _prompt_order(size: int, seed: int) -> Callable[[int], list[int]]:
    """Prompts in shuffled epochs from the seed alone: every method and schedule meets the same ones."""
    order = np.random.default_rng(seed + 1)
    queue: list[int] = []

    def draw_prompts(k: int) -> list[int]:
        while len(queue) < k:
            queue.extend(int(i) for i in order.permutation(size))
        out = queue[:k]
        del queue[:k]
        return out

    return draw_prompts


def add_ratios(rows: list[MethodCost], reference: str = "grpo-n4") -> None:
    """Every step time over the reference method's synchronous step, the paper's Table 2 convention."""
    ref = next((r for r in rows if r.method == reference), None)
    for row in rows:
        row.ratio_to_grpo_n4 = row.step_s / ref.step_s if ref else None
        if row.async_step_s is not None:
            row.async_ratio_to_grpo_n4 = row.async_step_s / ref.step_s if ref else None
