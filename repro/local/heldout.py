"""Held-out accuracy during CPU training: a fixed slice of the tiny-arith test tiers, scored every few steps.

Why: the training reward says how well the policy does on the prompts it is trained on (and, for Seq and
DAPO, on a selected batch); a curve of accuracy on problems it never trains on is what tells learning from
fitting. The set is the first `per_tier` problems of each test tier (`repro.tasks.tiny_arith.TIERS`, easy
to hard), which `tiny_arith.build` draws disjoint from the training pool, loaded by the evaluation's own
loader. Each problem gets `samples` responses at temperature 1.0 (the paper's evaluation setting, not
greedy), graded like `repro eval` grades the tiers ("boxed" mode, `repro.evaluation.grading`), but in
process: a grader worker would cost more than the whole evaluation.

The sampling draws from its own `torch.Generator`, seeded from (run seed, step) by `heldout_seed`, never
from the trainer's generator, so turning the evaluation on or off leaves the training trajectory bit for
bit the same, and a resumed run evaluates exactly what an uninterrupted one does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from repro import catalog
from repro.cpu_lm.generate import sample

ACCURACY = "heldout/accuracy"
RESPONSES = "heldout/n"
PROBLEMS = "heldout/problems"
TIMING = "timing_s/heldout"
GRADING = "reward"  # what `repro eval` uses for the tiny tiers (grading.benchmark_grading)
_STREAM_TAG = 0x4E1D  # keeps the held-out stream apart from every other stream seeded from the run seed


def heldout_seed(seed: int, step: int) -> int:
    """The held-out sampler's seed at `step`: a function of (run seed, step) only, never of the trainer's RNG."""
    return int(np.random.SeedSequence([int(seed), int(step), _STREAM_TAG]).generate_state(1, dtype=np.uint32)[0])


def is_eval_step(step: int, every: int, last: int) -> bool:
    """Steps scored: the first (the start of the curve), every `every`-th, and the last; none when every is 0."""
    return every > 0 and (step == 1 or step % every == 0 or step == last)


@dataclass(frozen=True)
class HeldoutProblem:
    benchmark: str
    problem_id: str
    question: str
    answer: str


def heldout_problems(per_tier: int) -> list[HeldoutProblem]:
    """The first `per_tier` problems of each tiny-arith test tier, in tier order (the eval's loader)."""
    from repro.evaluation.benchmarks import TINY_BENCHMARKS, load

    out = []
    for tier in TINY_BENCHMARKS:
        for p in load(tier)[:per_tier]:
            out.append(HeldoutProblem(tier, p.problem_id, p.problem, p.answer))
    return out


def score(text: str, answer: str) -> float:
    """1.0 when the response's answer equals the reference under the tiers' eval grading mode, else 0.0."""
    from repro.evaluation.extract import extract
    from repro.reward import _judge

    boxed = extract(text, GRADING)
    return 0.0 if boxed is None else float(_judge(boxed, str(answer).strip())[0])


class HeldoutEval:
    """Scores a model on the held-out set; the prompts are tokenized once, as the eval generator does it."""

    def __init__(
        self,
        tokenizer,
        problems: list[HeldoutProblem],
        samples: int,
        max_new_tokens: int,
        template: catalog.PromptTemplate | None = None,
    ) -> None:
        from repro.prompting import chat_messages, template_for

        template = template or template_for("tiny-arith")
        self.tokenizer = tokenizer
        self.problems = problems
        self.samples = int(samples)
        self.max_new_tokens = int(max_new_tokens)
        self.prompt_ids = [
            list(
                tokenizer.apply_chat_template(
                    chat_messages(p.question, template), add_generation_prompt=True, tokenize=True
                )["input_ids"]
            )
            for p in problems
        ]

    def responses(self, model: torch.nn.Module, seed: int) -> list[list[str]]:
        """`samples` response texts per problem: one batch of every problem repeated `samples` times."""
        flat = [ids for ids in self.prompt_ids for _ in range(self.samples)]
        out = sample(
            model,
            flat,
            max_new_tokens=self.max_new_tokens,
            eos_id=self.tokenizer.eos_token_id,
            pad_id=self.tokenizer.pad_token_id,
            generator=torch.Generator().manual_seed(seed),
            share_prompts=True,  # each problem prefilled once for its samples
        )
        texts = self.tokenizer.batch_decode(out, skip_special_tokens=True)
        k = self.samples
        return [texts[i * k : (i + 1) * k] for i in range(len(self.problems))]

    def __call__(self, model: torch.nn.Module, seed: int, step: int) -> dict[str, float]:
        """The step's held-out metrics: mean score over every response, their count, the problems, seconds."""
        t0 = time.perf_counter()
        texts = self.responses(model, heldout_seed(seed, step))
        scores = [score(t, p.answer) for p, group in zip(self.problems, texts, strict=True) for t in group]
        return {
            ACCURACY: float(np.mean(scores)),
            RESPONSES: float(len(scores)),
            PROBLEMS: float(len(self.problems)),
            TIMING: time.perf_counter() - t0,
        }
