"""A step's responses on the CPU trainer: one round's samples drawn from the run's generator and scored with the
project's reward, whole or, under the early exit (issue 46), each reported to the sampler as it ends so the rest
of its batch can be cancelled mid-decode.

`ResponseSampling` is a part of `repro.local.trainer.CpuTrainer`, kept apart because it is what a round of
sampling does, not what a step or a run does; it reads the trainer's model inputs and writes nothing of its own."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from repro.cpu_lm.generate import sample
from repro.local.config import CpuTrainConfig
from repro.local.prompts import Prompt
from repro.reward import compute_score
from repro.sampling import SamplerSpec, StepSampler
from repro.sampling.early_exit import BiasTally, first_returned


class ResponseSampling:
    """Generation and scoring for `CpuTrainer`, which sets these attributes."""

    tokenizer: Any  # a transformers tokenizer
    train: CpuTrainConfig
    generator: torch.Generator
    prompts: list[Prompt]
    spec: SamplerSpec

    def _generate(
        self, model: torch.nn.Module, slots_prompts: list[Prompt], counts: np.ndarray
    ) -> tuple[list[list[int]], list[float]]:
        flat_prompts = [p for p, c in zip(slots_prompts, counts, strict=True) for _ in range(int(c))]
        responses = self._sample(model, flat_prompts)
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        scores = [compute_score(p.data_source, t, p.ground_truth) for p, t in zip(flat_prompts, texts, strict=True)]
        return responses, scores

    def _sample(self, model: torch.nn.Module, prompts: list[Prompt], on_finish=None) -> list[list[int]]:
        """One response per prompt from the run's generator (the loop `repro.cpu_lm.generate.sample`)."""
        return sample(
            model,
            [p.question_ids for p in prompts],
            max_new_tokens=self.train.max_response_length,
            eos_id=self.tokenizer.eos_token_id,
            pad_id=self.tokenizer.pad_token_id,
            generator=self.generator,
            share_prompts=True,
            on_finish=on_finish,
        )

    def _generate_cut(
        self, model: torch.nn.Module, sampler: StepSampler, slots: np.ndarray, counts: np.ndarray, bias: BiasTally
    ) -> tuple[dict[int, list[list[int]]], int, int]:
        """One round under the early exit: every response is scored as it ends and reported to the sampler in
        its place of the request order; when a prompt's batch ends (`BatchEnd`) its responses still decoding are
        cancelled in the loop. Returns each slot's kept responses (pool order), the tokens of every response
        generated (cancelled ones as far as they got) and of the cancelled ones. `bias` tallies, for each batch
        the rule ends, what it keeps beside what the first-returned cut would have kept of the same returns."""
        ids = sampler.prompt_ids
        base = {int(slot): sampler.rewards[int(slot), : sampler.count[int(slot)]].copy() for slot in slots}
        arrived: dict[int, list[int]] = {}  # slot -> its rows back so far, in the order they returned
        reward: dict[int, float] = {}
        first_cut: set[int] = set()  # slots where the first-returned rule would have held by now
        where = [(int(slot), k) for slot, count in zip(slots, counts, strict=True) for k in range(int(count))]
        first = {int(slot): row for row, (slot, k) in enumerate(where) if k == 0}
        prompts = [self.prompts[ids[slot]] for slot, _k in where]
        ended: dict[int, list[int]] = {}
        kept: dict[int, list[list[int]]] = {}
        cancelled: set[int] = set()

        def on_finish(finished: list[tuple[int, list[int]]]) -> list[int]:
            """The rows that ended in one decode step, scored and reported together per prompt: responses back in
            the same instant return together (past the kept prefix they are dropped, not cancelled)."""
            back: dict[int, list[int]] = {}
            for row, response in finished:
                ended[row] = response
                back.setdefault(where[row][0], []).append(row)
            out: list[int] = []
            for slot, rows in back.items():
                scores = []
                for row in rows:
                    prompt, text = prompts[row], self.tokenizer.decode(ended[row], skip_special_tokens=True)
                    scores.append(compute_score(prompt.data_source, text, prompt.ground_truth))
                    reward[row] = scores[-1]
                back_rows = arrived.setdefault(slot, [])
                back_rows += rows
                if slot not in first_cut:
                    pool = np.concatenate([base[slot], [reward[row] for row in back_rows]])
                    if first_returned(self.spec, pool) is not None:  # the biased cut would keep these
                        first_cut.add(slot)
                        bias.add("first_returned", pool[base[slot].size :], [len(ended[r]) for r in back_rows])
                end = sampler.returned(slot, [where[row][1] for row in rows], scores)
                if end is not None:
                    kept[slot] = [ended[first[slot] + int(k)] for k in end.kept]
                    if slot in first_cut:  # the rule ended this batch: what it keeps, beside the above
                        rows_kept = [first[slot] + int(k) for k in end.kept]
                        bias.add("kept", [reward[r] for r in rows_kept], [len(ended[r]) for r in rows_kept])
                        bias.batches += 1
                    stop = [first[slot] + int(k) for k in end.cancelled]
                    cancelled.update(stop)
                    out += stop
            return out

        responses = self._sample(model, prompts, on_finish)
        generated = sum(len(r) for r in responses)
        return kept, generated, sum(len(responses[row]) for row in cancelled)
