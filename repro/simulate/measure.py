"""Synchronous against streaming Seq, timed through the plugin's own rollout code.

`run_adaptive_step` and `make_generate` (repro.verl_plugin.ada_loop, what ReinforceAdaAgentLoopManager
runs inside verl) drive `FakeLLMServer` (verl's `LLMServerClient.generate` interface, real TokenOutput)
whose responses are served by the cost model's engine in scaled real time. Responses, rewards and
lengths come from the same per-prompt streams as `cost.run_step`, so the cost model's prediction for the
same parameters is computed beside each measurement; only the schedule differs between the variants.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from repro.sampling.spec import SamplerSpec
from repro.simulate.async_engine import AsyncBatchingEngine
from repro.simulate.cost import LengthModel, TrainModel, _Draws, run_step
from repro.simulate.engine import ServerModel


@dataclass
class Measured:
    variant: str
    wall_s: float  # generation, measured
    predicted_s: float  # the cost model's generation time, scaled to wall seconds
    responses: int
    pool_sizes: np.ndarray  # per prompt slot


def _tokenizer():
    from repro.cpu_lm.tokenizer import build_tokenizer

    return build_tokenizer()


def measure_step(
    spec: SamplerSpec,
    pass_rates: np.ndarray,
    prompt_ids: list[int],
    *,
    server: ServerModel,
    lengths: LengthModel,
    scale: float,
    seed: int = 0,
    step: int = 0,
    tokenizer=None,
) -> Measured:
    """One step of `spec` through the plugin against the emulated server; wall time of generation."""
    from repro.verl_plugin.ada_loop import make_generate, run_adaptive_step
    from repro.verl_plugin.fake_server import FakeLLMServer

    tok = tokenizer or _tokenizer()
    draws = _Draws(pass_rates, lengths, seed, step)
    prompts = [tok.encode(f"p{i}", add_special_tokens=False) for i in prompt_ids]
    by_tokens = {tuple(p): i for p, i in zip(prompts, prompt_ids, strict=True)}
    engine = AsyncBatchingEngine(server, scale)

    def script(prompt: list[int], call_index: int) -> str:
        reward, _length = draws.peek(by_tokens[tuple(prompt)], call_index)
        return "\\boxed{1}" if reward > 0.5 else "\\boxed{0}"

    async def serve(prompt: list[int], call_index: int, _token_ids: list[int]) -> None:
        _reward, length = draws.peek(by_tokens[tuple(prompt)], call_index)
        await engine.run(length)

    fake = FakeLLMServer(tok, script, serve=serve)
    generate = make_generate(
        fake, tok, prompts, ["1"] * len(prompts), "emulated", {}, reward_fn=lambda _s, text, gt: float(gt in text)
    )

    async def go() -> tuple[float, object]:
        started = time.perf_counter()
        result = await run_adaptive_step(spec, prompt_ids, generate, step=step)
        return time.perf_counter() - started, result

    wall, result = asyncio.run(go())
    model = run_step(spec, prompt_ids, _Draws(pass_rates, lengths, seed, step), server, TrainModel(), step=step)
    sizes = np.array([result.pool_size[s] for s in range(len(prompt_ids))])
    if not np.array_equal(sizes, model.pool_sizes):
        raise AssertionError("the plugin and the cost model drew different pools from the same streams")
    return Measured(
        variant="stream" if spec.streaming else "sync",
        wall_s=wall,
        predicted_s=model.generation_s * scale,
        responses=len(fake.calls),
        pool_sizes=sizes,
    )


def measure_pair(
    spec: SamplerSpec, pass_rates: np.ndarray, prompt_ids: list[int], **kwargs
) -> tuple[Measured, Measured]:
    """The synchronous and the streaming variant of `spec` on the same step, one after the other
    (keyword arguments as for `measure_step`)."""
    kwargs.setdefault("tokenizer", _tokenizer())
    sync, stream = (
        measure_step(dataclasses.replace(spec, streaming=s), pass_rates, prompt_ids, **kwargs) for s in (False, True)
    )
    return sync, stream
