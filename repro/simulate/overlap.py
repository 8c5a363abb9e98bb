"""The overlapped (async) schedule of the cost model: generation of the next step runs while this one drains.

What verl 0.9.1's v1 `colocate_async` trainer does, read from its source (`trainer_base.py`,
`trainer_colocate_async.py`): rollout and training share the GPUs, so the update does not run beside
generation. Instead a step's batch is sampled as soon as its last prompt is done, every replica is aborted and
put to sleep for the update and weight sync, and generation resumes afterwards with the aborted requests
continued (`FullyAsyncLLMServerClient` resubmits prompt plus tokens so far). Meanwhile the next steps' prompts
(`num_warmup_batches` ahead, staleness bounded by `max_off_policy_threshold`) are already in the servers, so
the slots that a synchronous step leaves idle while its slowest prompts finish are filled with the next
step's work. Each prompt runs its rounds as a stream (the plugin's async manager keeps each prompt's rounds
going), so no round barrier remains either.

Modelled as: one continuous-batching engine for the whole run, FIFO as vLLM's default scheduler; every
prompt of the steps in flight streams its batches; when the oldest step in flight has its last response,
the engine is frozen for that step's training time and the next step is admitted. Resumed requests keep
their tokens and pay no second prefill (an optimistic simplification: vLLM's prefix cache usually holds
them). The step time is the run's whole time over its steps. Not the mean gap between update ends: over a
few steps that gap leaves out the next step's work already done before the first update (at paper scale,
4 steps: 2.00x GRPO-n4's synchronous step for Seq-balance, below the 2.18x floor no schedule can beat),
while the whole run's time holds every token of the steps trained plus the next step's work in flight at
the end, so it errs on the slow side (Seq-balance 2.42x over 4 steps, 2.36x over 12, 2.33x over 48).

A paper run is 600 steps, so what it pays per step is the steady state: `steady_step_s`, the mean gap between
update ends without the first and the last (the fill, and a last step with nothing admitted behind it), over
whole cycles of `ahead + 1` gaps, at least `STEADY_MIN_STEPS` of them. Whole cycles because the steps in flight
share the servers and the gaps repeat: with one step ahead they alternate short and long (at paper scale
Seq-balance's are about 0.85x and 3.8x GRPO-n4's step), so a mean over an odd count is off by half a swing
over the count. Seq-balance at paper scale, one step ahead: 2.32x over 18, 24 and 48 steps alike (whole-run
2.35x, 2.34x, 2.33x).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from repro.sampling import StepSampler
from repro.sampling.spec import SamplerSpec
from repro.simulate.engine import BatchingEngine, ServerModel, by_owner
from repro.simulate.workload import LengthModel, Streams, TrainModel, _Draws

STEADY_MIN_STEPS = 16  # gaps between update ends the steady-state step time averages over, at least


@dataclass
class OverlapCost:
    step_s: float  # the run's time over its steps: every token of them is generated inside it
    train_s: float  # mean update time (the servers sleep meanwhile)
    generated_tokens: float  # per step
    staleness_max: int  # most updates between a trained prompt's first request and its own update
    staleness_mean: float
    step_ends: list[float] = field(default_factory=list, repr=False)  # when each update finished
    steady_step_s: float | None = None  # a long run's step (see the module doc); None on short runs
    train_times: list[float] = field(default_factory=list, repr=False)
    tokens_per_step: list[float] = field(default_factory=list, repr=False)

    @property
    def generation_s(self) -> float:
        """The generation window per step: the step minus its update."""
        return self.step_s - self.train_s


def simulate_overlap(
    spec: SamplerSpec,
    pass_rates: np.ndarray,
    *,
    server: ServerModel,
    lengths: LengthModel,
    train: TrainModel,
    steps: int,
    batch: int,
    seed: int,
    draw_prompts: Callable[[int], Sequence[int]],
    ahead: int = 1,
    estimator=None,
    streams: Streams | None = None,
) -> OverlapCost:
    """`steps + 1` steps with `ahead` steps admitted beyond the one in training (verl's `num_warmup_batches`,
    1 by default).

    Draws are those of the synchronous schedule (`_Draws` per step and prompt), so every schedule of a
    method meets the same responses; an Est step allocates from the estimator as it stands when the step is
    admitted, before the step ahead of it has updated it, which is what staleness does to Est.
    """
    if ahead < 0:
        raise ValueError(f"ahead must be >= 0, got {ahead}")
    total = steps + 1
    cut = spec.early_exit != "off"
    engine = BatchingEngine(server)
    paused = 0.0  # seconds the engine was frozen for updates
    samplers: dict[int, StepSampler] = {}
    draws: dict[int, _Draws] = {}
    lengths_of: dict[int, list[list[int]]] = {}  # step -> slot -> lengths of its responses, arrival order
    first_version: dict[int, list[int | None]] = {}  # step -> slot -> updates done when it was first requested
    owner: list[tuple[int, int, float, int]] = []  # request id -> (step, slot, reward, length)
    left: dict[tuple[int, int], int] = {}
    waiting: dict[tuple[int, int], list[int]] = {}
    tokens: dict[int, float] = {}
    prompt_ids: dict[int, list] = {}  # step -> its sampler's prompt ids (the property copies them)
    trained = 0
    ends: list[float] = []
    train_times: list[float] = []
    staleness: list[int] = []

    def submit(step: int, slot: int, count: int) -> None:
        rewards, lens = draws[step].next(prompt_ids[step][slot], count)
        ids = list(range(len(owner), len(owner) + count))
        lens_list = lens.tolist()
        owner.extend((step, slot, reward, length) for reward, length in zip(rewards.tolist(), lens_list, strict=True))
        engine.submit_many(ids, lens_list)
        waiting[(step, slot)], left[(step, slot)] = ids, count
        if first_version[step][slot] is None:
            first_version[step][slot] = trained
        tokens[step] = tokens.get(step, 0.0) + float(lens.sum())

    def feed(step: int, slots: Sequence[int]) -> None:
        """Issue the next batch of each of `slots` that wants one, and DAPO's refill prompts when due."""
        sampler = samplers[step]
        if wanted := sampler.prompts_wanted():  # DAPO's refill batch
            slots = [*slots, *sampler.add_prompts(list(draw_prompts(wanted))).tolist()]
            prompt_ids[step] = sampler.prompt_ids
        while len(lengths_of[step]) < sampler.num_slots:
            lengths_of[step].append([])
            first_version[step].append(None)
        for slot in slots:
            if count := sampler.request(int(slot)):
                submit(step, int(slot), count)

    def admit(step: int) -> None:
        draws[step] = _Draws(pass_rates, lengths, seed, step, streams)
        samplers[step] = StepSampler(spec, list(draw_prompts(batch)), step=step, estimator=estimator)
        prompt_ids[step] = samplers[step].prompt_ids
        lengths_of[step], first_version[step] = [], []
        feed(step, range(samplers[step].num_slots))

    for step in range(min(total, 1 + ahead)):
        admit(step)
    current, changed = 0, True  # changed: the oldest step's sampler moved since done() last said no
    while current < total:
        if changed and samplers[current].done():
            result = samplers.pop(current).finalize()
            kept = [lengths_of[current][int(s)][int(i)] for s, i in zip(result.slot, result.index, strict=True)]
            train_s = train.fixed + train.per_token * (int(sum(kept)) + len(kept) * server.prompt_tokens)
            paused += train_s  # the update: every replica aborted and asleep
            train_times.append(train_s)
            staleness += [trained - v for v in first_version.pop(current) if v is not None]
            trained += 1
            ends.append(engine.now + paused)
            current += 1
            if current + ahead < total:
                admit(current + ahead)
            continue
        changed = False
        if engine.idle:
            raise RuntimeError(f"step {current} is not done but nothing is running")
        finished = engine.step()
        if cut:  # the early exit: a batch may end before all of it is back, the rest cancelled
            for (step, slot), request_ids in by_owner(finished, lambda i: owner[i][:2], waiting).items():
                ids = waiting[(step, slot)]
                positions = [i - ids[0] for i in request_ids]
                end = samplers[step].returned(slot, positions, [owner[i][2] for i in request_ids])
                if end is None:
                    continue
                del waiting[(step, slot)]
                lengths_of[step][slot] += [owner[ids[k]][3] for k in end.kept.tolist()]
                if end.cancelled.size:  # their tokens not decoded are not generated
                    tokens[step] -= sum(engine.cancel([ids[k] for k in end.cancelled.tolist()]).values())
                feed(step, [slot])
                changed = changed or step == current
            continue
        for request_id, _t in finished:
            step, slot, _reward, _length = owner[request_id]
            key = (step, slot)
            left[key] -= 1
            if left[key] == 0:
                ids = waiting.pop(key)
                lengths_of[step][slot] += [owner[i][3] for i in ids]
                samplers[step].observe(slot, np.array([owner[i][2] for i in ids]))
                feed(step, [slot])
                changed = changed or step == current
    inner = np.diff(ends)[1:-1]  # neither the fill nor the last step, which has nothing admitted behind it
    cycle = ahead + 1  # steps that share the servers: the gaps repeat with this period
    inner = inner[: len(inner) // cycle * cycle]  # whole cycles
    steady = float(inner.mean()) if len(inner) >= STEADY_MIN_STEPS else None
    return OverlapCost(
        step_s=ends[-1] / total,
        steady_step_s=steady,
        train_s=float(np.mean(train_times)),
        generated_tokens=float(np.mean([tokens[s] for s in range(total)])),
        staleness_max=int(max(staleness)),
        staleness_mean=float(np.mean(staleness)),
        step_ends=ends,
        train_times=train_times,
        tokens_per_step=[tokens[s] for s in range(total)],
    )
