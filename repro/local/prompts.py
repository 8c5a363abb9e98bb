"""The CPU trainer's training prompts: verl-format Parquet rows tokenized through the model's chat template, and
the shuffled epochs it draws them in (its state is a checkpoint's few numbers, so a resume draws what an
uninterrupted run would)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


class EpochLoader:
    """Prompt indices in shuffled epochs; its whole state is a few numbers and an RNG state."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.rng = np.random.default_rng([seed, 7])
        self.epoch = 0
        self.order = self.rng.permutation(size)
        self.pos = 0

    def draw(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            if self.pos == self.size:
                self.epoch += 1
                self.order, self.pos = self.rng.permutation(self.size), 0
            take = min(k - len(out), self.size - self.pos)
            out.extend(int(i) for i in self.order[self.pos : self.pos + take])
            self.pos += take
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos, "order": self.order.tolist(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self.order = np.asarray(state["order"], dtype=np.int64)
        self.rng.bit_generator.state = state["rng"]


@dataclass
class Prompt:
    index: int
    question_ids: list[int]
    ground_truth: str
    data_source: str


def load_prompts(path: Path, tokenizer) -> list[Prompt]:
    """verl-format Parquet rows -> tokenized prompts through the model's chat template."""
    import pandas as pd

    frame = pd.read_parquet(path)
    out = []
    for i, row in enumerate(frame.itertuples(index=False)):
        messages = [dict(m) for m in row.prompt]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
        out.append(Prompt(i, list(ids), str(row.reward_model["ground_truth"]), str(row.data_source)))
    return out
