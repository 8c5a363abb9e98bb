"""What a simulated step meets: response lengths, the update's cost, the per-prompt streams of rewards and
lengths, and the prompt order; shared by the synchronous (`repro.simulate.cost`) and overlapped
(`repro.simulate.overlap`) schedules, so that both meet the same prompts with the same responses."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np


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


Streams = dict[tuple, tuple[np.ndarray, np.ndarray]]


class _Draws:
    """Reward and length of each request, drawn from a stream per prompt id and call index, so that two
    schedules of the same step see the same responses in the same per-prompt order.

    `shared`: streams already drawn by other `_Draws` (other methods and schedules of one run meet the same
    prompts at the same steps), keyed by everything a stream is drawn from, its length included, so that a
    stream is the very array this instance would have drawn."""

    def __init__(
        self, pass_rates: np.ndarray, lengths: LengthModel, seed: int, step: int, shared: Streams | None = None
    ) -> None:
        self.pass_rates, self.lengths, self.seed, self.step = pass_rates, lengths, seed, step
        self._calls: dict[Hashable, int] = {}
        self._cache: dict[Hashable, tuple[np.ndarray, np.ndarray]] = {}
        self._shared = shared

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
            rate = self.pass_rates[int(prompt_id)]
            key = (self.seed, self.step, int(prompt_id), float(rate), self.lengths, size)
            have = None if self._shared is None else self._shared.get(key)
            if have is None:
                # two generators, so that a longer stream extends a shorter one instead of replacing it
                base = [self.seed, self.step, int(prompt_id)]
                correct = np.random.default_rng([*base, 0]).random(size) < rate
                have = (correct.astype(float), self.lengths.draw(np.random.default_rng([*base, 1]), correct))
                if self._shared is not None:
                    have[0].flags.writeable = have[1].flags.writeable = False
                    self._shared[key] = have
            self._cache[prompt_id] = have
        return have


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
