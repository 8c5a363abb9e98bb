"""The asynchronous driver of one step of Reinforce-Ada sampling, for the verl rollout manager.

The algorithm lives in the numpy core (`repro.sampling.StepSampler`); this module only schedules it.
A caller supplies `generate(slot, count)`, an awaitable that produces `count` scored responses for the
prompt in `slot` (in production: `count` concurrent agent-loop runs against verl's `LLMServerClient`,
each scored, the payload being verl's `AgentLoopOutput`), and gets back the update group of every
prompt with its pool statistics.

Two schedules, chosen by `spec.streaming` (METHODS.md "seq-*-stream"):

- synchronous (the paper's Seq): rounds with a barrier. Each round asks the core which prompts need
  how many responses (`plan()`), awaits all of them together, then reports every reward;
- streaming: one task per prompt, each asking for its next batch (`request(slot)`) as soon as its
  previous batch is scored, so no prompt waits for the slowest response of another.

Per prompt the sequence of requests is the same in both (the core decides from that prompt's own pool),
so for the same per-prompt response streams both give identical pools and update groups; only the
interleaving across prompts changes. Responses are numbered per prompt in arrival order: the order
`generate` returns them, batch after batch, which is the order the core sees them.

DAPO (METHODS.md "DAPO"; `spec.kind == "dapo"`) runs synchronous rounds only: each generation batch is
one request of `n` responses per prompt, and a refill is decided once the whole batch is scored. The
caller then supplies `refill(count)`, an awaitable returning `count` fresh prompt ids; whenever the core
wants more prompts (`StepSampler.prompts_wanted()`, at most `max_num_gen_batches` generation batches in
all) the driver awaits it, adds the ids with `add_prompts` (they take the next `count` slots, in order,
so the caller's slot -> prompt table just grows) and generates for them through the same
`generate(slot, count)`. At the cap the core decides, as on the CPU path (`repro.local.trainer` lets
it propagate): `on_cap="short"` trains on the mixed groups collected so far (`dapo/cap_hit` = 1),
`on_cap="error"` raises `DapoCapExceeded` out of this driver.

Seq's early exit (`spec.early_exit`, issue 46) needs more than whole batches: the caller supplies a `Streamed`
(start a prompt's batch, wait for the next of its responses to return, cancel some in flight, end the batch with
the ones kept), and each batch ends as soon as the core's rule holds on what has returned
(`StepSampler.returned`); a round's barrier waits only for the batches still open.

Framework-light on purpose: numpy and asyncio only, no torch or verl at import time, so the verl worker
can import it cheaply and the tests can drive it with a fake server (`fake_server.FakeLLMServer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from uuid import uuid4

import numpy as np

from repro.reward import compute_score
from repro.sampling.policies import policy_for
from repro.sampling.spec import SamplerSpec
from repro.sampling.step import StepResult, StepSampler

if TYPE_CHECKING:
    from repro.sampling.estimator import BetaBernoulliEstimator

logger = logging.getLogger(__name__)

# A `generate(slot, count)` batch that raises is retried this many times; when every try failed, its prompt
# is given up for the step (`StepSampler.fail`: no update group, no estimator update, counted as
# `sampler/failed_prompts`) and the step finishes for the others. Only a step where every prompt failed raises.
GENERATE_RETRIES = 2


@dataclass
class Sample:
    """One generated, scored response."""

    reward: float
    payload: Any  # whatever the generator returns (a verl AgentLoopOutput in production)


GenerateFn = Callable[[int, int], Awaitable[list[Sample]]]  # (slot, count) -> count scored samples


class Streamed(Protocol):
    """A prompt's batch response by response, for the early exit (positions: places in the batch's request
    order). `wait` returns every response back since the last call, at least one; `cancel` stops responses in
    flight (their server requests aborted); `end` says which responses the pool keeps, in order."""

    async def start(self, slot: int, count: int) -> None: ...

    async def wait(self, slot: int) -> list[tuple[int, float]]: ...

    async def cancel(self, slot: int, positions: list[int]) -> None: ...

    async def end(self, slot: int, kept: list[int]) -> None: ...


RefillFn = Callable[[int], Awaitable[Sequence[Hashable]]]  # count -> count fresh prompt ids (DAPO)
RewardFn = Callable[..., float]


@dataclass
class AdaptiveStep:
    """One step's outcome, per prompt slot (every slot of the step is a key of every dict)."""

    kept: dict[int, list[Sample]]  # the update group (exactly n for seq; all drawn for est), arrival order
    kept_index: dict[int, list[int]]  # arrival indices of the kept samples within the prompt's pool
    pool_mean: dict[int, float]  # mean reward of the whole pool: the global baseline
    pool_size: dict[int, int]
    weight: dict[int, float]  # Est residual weight (1 elsewhere)
    pool_std: dict[int, float]  # unbiased (ddof=1), 0 for a pool of one
    metrics: dict[str, float]  # StepResult.metrics
    result: StepResult
    pools: dict[int, list[Sample]] = field(default_factory=dict)  # everything drawn, arrival order
    kept_advantage: dict[int, list[float]] = field(default_factory=dict)  # the core's advantage per kept
    failed: dict[int, str] = field(default_factory=dict)  # slots given up after retries -> the last error

    def rows(self) -> list[tuple[int, Sample, float]]:
        """The update batch flat, in the core's row order (slot-major): (slot, sample, advantage)."""
        return [(s, x, a) for s in sorted(self.kept) for x, a in zip(self.kept[s], self.kept_advantage[s], strict=True)]


async def _gather_or_cancel(coros: Iterable[Awaitable[Any]]) -> list[Any]:
    """asyncio.gather that cancels the siblings when one fails and re-raises that first error as is."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def run_adaptive_step(
    spec: SamplerSpec,
    prompt_ids: Sequence[Hashable],
    generate: GenerateFn,
    *,
    step: int = 0,
    estimator: BetaBernoulliEstimator | None = None,
    max_concurrency: int | None = None,
    max_retries: int = GENERATE_RETRIES,
    refill: RefillFn | None = None,
    streamed: Streamed | None = None,
) -> AdaptiveStep:
    """Sample one step for `prompt_ids` (slot i is prompt_ids[i]) and select the update groups.

    `max_concurrency` caps how many `generate(slot, count)` batches are awaited at once (a prompt's
    batch counts once however large it is); None means no cap. Seq, Est and uniform sample the given
    prompts only; DAPO also needs `refill` (see the module docstring), whose prompts take slots
    len(prompt_ids), len(prompt_ids) + 1, ... in the order they are returned. The early exit needs `streamed`
    (see `Streamed`); its batches are not retried (a failed one fails its prompt).
    """
    if spec.early_exit != "off" and streamed is None:
        raise ValueError("the early exit ends batches response by response: pass streamed=(a Streamed)")
    if policy_for(spec).refills and refill is None:
        raise ValueError(
            "dapo draws more prompt batches: pass refill=(count -> fresh prompt ids); on the verl path the "
            "plugin's manager does, in place of verl's native filter_groups"
        )
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    sampler = StepSampler(spec, prompt_ids, step=step, estimator=estimator)
    pools: dict[int, list[Sample]] = {slot: [] for slot in range(sampler.num_slots)}
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency is not None else None

    failures: dict[int, str] = {}
    errors: list[Exception] = []
    retries = 0

    async def attempt(slot: int, count: int) -> list[Sample]:
        if gate is None:
            return list(await generate(slot, count))
        async with gate:
            return list(await generate(slot, count))

    async def draw(slot: int, count: int) -> list[Sample] | None:
        """`count` samples for `slot`, retried on an error; None when every try failed (see GENERATE_RETRIES)."""
        nonlocal retries
        if count < 1:
            raise RuntimeError(f"slot {slot}: the sampler asked for {count} responses")
        for tries in range(max_retries + 1):
            try:
                samples = await attempt(slot, count)
            except Exception as exc:  # a lost request, a server error; cancellation (BaseException) propagates
                error = exc
                if tries < max_retries:
                    retries += 1
                    logger.warning(
                        "prompt %r: generating %d responses failed (%s: %s); retry %d of %d",
                        sampler.prompt_ids[slot],
                        count,
                        type(exc).__name__,
                        exc,
                        tries + 1,
                        max_retries,
                    )
                continue
            if len(samples) != count:  # a broken generator, not a failed request: not retried
                raise RuntimeError(f"slot {slot}: generate returned {len(samples)} samples for {count} requested")
            return samples
        logger.error(
            "prompt %r failed %d times; it is left out of this step",
            sampler.prompt_ids[slot],
            max_retries + 1,
            exc_info=error,
        )
        failures[slot] = f"{type(error).__name__}: {error}"
        errors.append(error)
        return None

    def accept(slot: int, samples: list[Sample] | None) -> None:
        if samples is None:
            sampler.fail(slot)
            return
        pools[slot].extend(samples)
        sampler.observe(slot, np.array([float(s.reward) for s in samples]))

    async def draw_cut(slot: int, count: int) -> list[Sample] | None:
        """One batch under the early exit: responses reported as they return, the rest cancelled once the rule
        holds; the kept samples (pool order), or None when the batch failed."""
        assert streamed is not None
        try:
            await streamed.start(slot, count)
            while True:
                back = await streamed.wait(slot)
                end = sampler.returned(slot, [p for p, _ in back], [r for _, r in back])
                if end is not None:
                    break
        except Exception as exc:  # a lost request, a server error: the prompt is given up (no retry mid-batch)
            logger.error("prompt %r: its batch failed under the early exit", sampler.prompt_ids[slot], exc_info=exc)
            failures[slot] = f"{type(exc).__name__}: {exc}"
            errors.append(exc)
            with contextlib.suppress(Exception):  # stop what is still decoding; the batch is lost either way
                await streamed.cancel(slot, list(range(count)))
            sampler.fail(slot)
            return None
        if end.cancelled.size:
            await streamed.cancel(slot, end.cancelled.tolist())
        await streamed.end(slot, end.kept.tolist())
        base = len(pools[slot])
        return [Sample(float(r), None) for r in sampler.rewards[slot, base : base + end.kept.size]]

    def accept_cut(slot: int, samples: list[Sample] | None) -> None:
        if samples is not None:  # the core has them already (`returned`)
            pools[slot].extend(samples)

    if spec.early_exit != "off":  # the same schedules, each batch ended by the rule (Seq has no refills)
        draw, accept = draw_cut, accept_cut  # type: ignore[assignment]
    if policy_for(spec).refills:
        assert refill is not None
        await _run_dapo_rounds(sampler, pools, draw, accept, refill)
    elif spec.streaming:

        async def prompt_task(slot: int) -> None:
            while (count := sampler.request(slot)) > 0:
                accept(slot, await draw(slot, count))

        await _gather_or_cancel(prompt_task(slot) for slot in range(sampler.num_slots))
    else:
        while await _run_round(sampler, draw, accept):
            pass

    if not sampler.done():  # pragma: no cover - the core guarantees this once nothing is waiting
        raise RuntimeError("sampling stopped with prompts still needing responses")
    if len(failures) == sampler.num_slots:
        tries = max_retries + 1
        raise RuntimeError(f"every prompt of the step failed ({tries} tries each): {errors[-1]!r}") from errors[-1]
    out = _assemble(sampler.finalize(), pools)
    out.failed = dict(sorted(failures.items()))
    out.metrics["sampler/generate_retries"] = float(retries)
    return out


async def _run_round(
    sampler: StepSampler,
    draw: Callable[[int, int], Awaitable[list[Sample]]],
    accept: Callable[[int, list[Sample]], None],
) -> bool:
    """One synchronous round: every prompt the core plans for, drawn together, then reported; False when
    the core plans nothing more."""
    slots, counts = sampler.plan()
    if slots.size == 0:
        return False
    batches = await _gather_or_cancel(draw(int(s), int(c)) for s, c in zip(slots, counts, strict=True))
    for slot, samples in zip(slots, batches, strict=True):
        accept(int(slot), samples)
    return True


async def _run_dapo_rounds(
    sampler: StepSampler,
    pools: dict[int, list[Sample]],
    draw: Callable[[int, int], Awaitable[list[Sample]]],
    accept: Callable[[int, list[Sample]], None],
    refill: RefillFn,
) -> None:
    """DAPO's generation batches: score a whole batch, then refill while the core wants prompts.

    `prompts_wanted()` raises `DapoCapExceeded` at the cap under `on_cap="error"`; it propagates.
    """
    while True:
        wanted = sampler.prompts_wanted()
        if wanted > 0:
            fresh = list(await refill(wanted))
            if len(fresh) != wanted:
                raise RuntimeError(f"refill returned {len(fresh)} prompts for {wanted} requested")
            first = sampler.num_slots
            slots = sampler.add_prompts(fresh)
            if [int(s) for s in slots] != list(range(first, first + wanted)):  # pragma: no cover - core contract
                raise RuntimeError(f"refill slots {slots.tolist()} are not the next {wanted} slots after {first}")
            for slot in slots:
                pools[int(slot)] = []
        if not await _run_round(sampler, draw, accept) and not sampler.prompts_wanted():
            break  # (GRESO: when every prompt drawn was skipped, it draws again)


def _assemble(result: StepResult, pools: dict[int, list[Sample]]) -> AdaptiveStep:
    slots = len(pools)
    # np.nonzero in finalize() yields rows sorted by slot, then by arrival index.
    bounds = np.searchsorted(result.slot, np.arange(slots + 1))
    kept: dict[int, list[Sample]] = {}
    kept_index: dict[int, list[int]] = {}
    kept_advantage: dict[int, list[float]] = {}
    pool_std: dict[int, float] = {}
    for slot in range(slots):
        pool = pools[slot]
        if len(pool) != int(result.pool_size[slot]):
            raise RuntimeError(f"slot {slot}: {len(pool)} samples held but the core counted {result.pool_size[slot]}")
        lo, hi = int(bounds[slot]), int(bounds[slot + 1])
        index = [int(i) for i in result.index[lo:hi]]
        kept_index[slot] = index
        kept[slot] = [pool[i] for i in index]
        kept_advantage[slot] = [float(a) for a in result.advantage[lo:hi]]
        rewards = np.array([float(s.reward) for s in pool])
        pool_std[slot] = float(rewards.std(ddof=1)) if rewards.size > 1 else 0.0
    return AdaptiveStep(
        kept=kept,
        kept_index=kept_index,
        pool_mean={s: float(result.pool_mean[s]) for s in range(slots)},
        pool_size={s: int(result.pool_size[s]) for s in range(slots)},
        weight={s: float(result.weight[s]) for s in range(slots)},
        pool_std=pool_std,
        metrics=dict(result.metrics),
        result=result,
        pools=pools,
        kept_advantage=kept_advantage,
    )


@dataclass
class Generation:
    """The payload `make_generate` attaches to each sample."""

    prompt_ids: list[int]
    response_ids: list[int]
    text: str
    reward: float
    stop_reason: str | None


def make_generate(
    server: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    ground_truths: Sequence[str],
    data_source: str | Sequence[str],
    sampling_params: dict[str, Any],
    reward_fn: RewardFn = compute_score,
    *,
    max_concurrency: int | None = None,
) -> GenerateFn:
    """A `GenerateFn` over anything with `LLMServerClient.generate`'s interface (verl 0.9.1).

    Each of the `count` responses of a batch is its own `server.generate(request_id=<fresh uuid>,
    prompt_ids=..., sampling_params=...)` call, all issued concurrently; the token ids are decoded with
    `skip_special_tokens=True` and scored with `reward_fn(data_source, text, ground_truth)` (the project's
    math-verify `compute_score` by default, called inline: it is memoised and cheap after warm-up).
    Every call gets its own copy of `sampling_params`, since a server may consume keys from it.
    `max_concurrency` caps the server requests in flight across all prompts (None: no cap). Samples come
    back in call order, so a prompt's arrival index equals its call order.
    """
    if len(prompts) != len(ground_truths):
        raise ValueError(f"{len(prompts)} prompts but {len(ground_truths)} ground truths")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
    prompt_lists = [[int(t) for t in p] for p in prompts]  # Python ints, as the server's pydantic types want
    sources = [data_source] * len(prompts) if isinstance(data_source, str) else list(data_source)
    if len(sources) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(sources)} data sources")
    params = dict(sampling_params)
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency is not None else None

    async def call(prompt: list[int]) -> Any:
        return await server.generate(request_id=uuid4().hex, prompt_ids=list(prompt), sampling_params=dict(params))

    async def one(slot: int) -> Sample:
        prompt = prompt_lists[slot]
        if gate is None:
            output = await call(prompt)
        else:
            async with gate:
                output = await call(prompt)
        response_ids = list(output.token_ids)
        text = tokenizer.decode(response_ids, skip_special_tokens=True)
        reward = float(reward_fn(sources[slot], text, ground_truths[slot]))
        return Sample(reward, Generation(prompt, response_ids, text, reward, output.stop_reason))

    async def generate(slot: int, count: int) -> list[Sample]:
        return await _gather_or_cancel(one(slot) for _ in range(count))

    return generate
