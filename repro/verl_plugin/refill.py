"""DAPO on the verl path: the manager's refill prompts and which prompt groups it hands to verl's trainer.

No Ray, TransferQueue or verl import here, so all of it is unit-tested on CPU; `rollout.py`'s manager
only moves what these functions decide.

Refill prompts. verl's trainer gives the rollout manager one batch of `data.train_batch_size` prompts
per step (its dataloader, `data.gen_batch_size` unset). DAPO needs more when the batch has too few
mixed groups, so the manager keeps its own stream over the same training set (`data.train_files`, read
with pandas): `RefillStream` shuffles the rows with an RNG seeded by (`data.seed`, global step), so a
resumed run draws the same refills at the same step whatever happened before, and excludes the step's
own batch when the set's `extra_info.index` names its prompts uniquely. Each row is built as verl 0.9.1's
`RLHFDataset.__getitem__` builds it (every parquet column, `raw_prompt`, `dummy_tensor`, `index`,
`tools_kwargs`, `interaction_kwargs`; text-only prompts, `data.filter_overlong_prompts` is off in our
configs), with the trainer's two additions: a fresh `uid` (uuid4, as `_fetch_one_gen_batch` makes them;
never reused, even when the same prompt is drawn again) and `global_steps`. So a refill prompt reaches
`AdaWorker.ada_begin`, verl's agent loop and reward path with exactly the fields a dataloader prompt
has, and its published trajectories carry the same columns as the others in TransferQueue.

What verl's trainer reads back (`verl/trainer/ppo/v1/trainer_base.py`, `replay_buffer.py`,
`agent_loop_tq.py`, verl 0.9.1, `trainer_mode=sync`). The trainer registers each dataloader prompt in
TransferQueue's "train" partition under its uid with tag `{"is_prompt": True, "status": "pending",
"global_steps": step}`, then calls the manager's `generate_sequences` (ours returns when the whole step
is sampled). `ReplayBuffer.sample(batch_size=train_batch_size)` then lists the partition: prompt keys
(`is_prompt`) by status, everything else a trajectory key `{uid}_{session}_{i}`. With
`algorithm.filter_groups.enable=false` it waits until at least `batch_size` prompt keys are terminal
("finished" or "failure"), picks `batch_size` of them (sorted by global step, otherwise in no defined
order), and materialises every trajectory key whose uid prefix is picked; prompt keys that are not
picked stay in TransferQueue and would be picked at a later step. So after a DAPO step the partition must
hold exactly `train_batch_size` terminal prompt keys, whose trajectories are the update batch:
- a refill prompt is registered with the trainer's own prompt tag when its worker begins it (the
  trainer never saw its uid), so every prompt of the step is a prompt key with a status from the start;
- a kept prompt (a mixed group the core selected) is published under its uid as verl's own worker
  publishes `rollout.n` sessions (`{uid}_{j}_0`, j < n) and marked "finished";
- a dropped prompt (all-equal group, or mixed but beyond the first `train_batch_size`) has its prompt
  key cleared (`kv_clear`), whether the trainer or the manager registered it, and nothing published;
- only at the cap with `on_cap="short"` (fewer mixed groups than `train_batch_size`) some dropped
  dataloader prompts stay registered as "finished" with no trajectories, enough to make up the count:
  the replay buffer selects them, contributes no rows for them, and verl pads the short batch to its
  mini-batch multiple with loss-masked rows, so the update is the k mixed groups x n of the CPU path.
  None at all (k = 0) would make the replay buffer raise; the manager raises `DapoCapExceeded` first.
With the cap not hit, the update batch is exactly `train_batch_size` prompts x `n` rows.

Why not verl's implementation (METHODS.md says "use verl's implementation" for DAPO): verl 0.9.1's v1
trainer runs DAPO in the replay buffer, and there `algorithm.filter_groups.max_num_gen_batches` is ignored
with a warning, `data.gen_batch_size` is forced to 1 (refills of single prompts, two per evicted group),
refills are unbounded and nothing reports the generation batches used, so METHODS.md's bounded refills
("until 512 prompts with mixed groups are collected, or a cap on generation batches is hit") and the
`dapo/*` metrics of the CPU path cannot be had from it. The plugin's manager already drives the sampling
core, which implements DAPO's state machine once for every path (`StepSampler.prompts_wanted`), so the
GPU cell uses that with verl's grpo advantage over each kept group, and verl's filter stays off.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repro.sampling.step import DapoCapExceeded

STREAM_TAG = 0xDA90  # keeps this stream apart from the other generators seeded with (seed, step)
MULTIMODAL_KEYS = ("images", "videos", "audios")  # RLHFDataset's image_key/video_key/audio_key defaults


def to_python(value: Any) -> Any:
    """pandas/pyarrow values (numpy arrays and scalars, nested) as the plain Python a HF dataset yields."""
    if isinstance(value, np.ndarray):
        return [to_python(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): to_python(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_python(v) for v in value]
    return value


def dataset_row(record: Mapping[str, Any], prompt_key: str = "prompt") -> dict[str, Any]:
    """One parquet record as verl 0.9.1's `RLHFDataset.__getitem__` returns it, for text-only prompts."""
    import torch

    row = {str(k): to_python(v) for k, v in record.items()}
    row["raw_prompt"] = row[prompt_key]
    for key in MULTIMODAL_KEYS:
        row.pop(key, None)
    row["dummy_tensor"] = torch.tensor([0], dtype=torch.uint8)
    if row.get("extra_info") is None:
        row["extra_info"] = {}
    extra = row["extra_info"]
    row["index"] = extra.get("index", 0)
    row["tools_kwargs"] = extra.get("tools_kwargs", {})
    row["interaction_kwargs"] = extra.get("interaction_kwargs", {})
    return row


def load_records(files: str | Path | Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every row of `data.train_files` (one path or several), in file order."""
    import pandas as pd

    paths = [files] if isinstance(files, str | Path) else list(files)
    records: list[dict[str, Any]] = []
    for path in paths:
        records.extend(pd.read_parquet(str(path)).to_dict("records"))
    if not records:
        raise ValueError(f"no training rows in {paths}")
    return records


def _dataset_index(record: Mapping[str, Any]) -> Any:
    extra = record.get("extra_info")
    return to_python(extra.get("index", 0)) if isinstance(extra, Mapping) else 0


class RefillStream:
    """A step's refill prompts: the training rows in an order fixed by (seed, step), without repeats.

    `exclude` holds the `index` values of the step's dataloader batch; they are skipped when the set's
    indices are unique (otherwise an index does not name one prompt and nothing is skipped). Past the end
    the rows are shuffled again and drawn anew (a tiny set can need more than one pass).
    """

    def __init__(
        self,
        records: Sequence[Mapping[str, Any]],
        *,
        seed: int | None,
        step: int,
        exclude: Iterable[Any] = (),
        prompt_key: str = "prompt",
        new_uid: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        if not records:
            raise ValueError("a refill stream needs at least one training row")
        self._records = records
        self._prompt_key = prompt_key
        self._new_uid = new_uid
        self._step = int(step)
        self._rng = np.random.default_rng([int(seed or 0), int(step), STREAM_TAG])
        indices = [_dataset_index(r) for r in records]
        skip = set(exclude) if len(set(map(repr, indices))) == len(indices) else set()
        allowed = np.array([i for i, x in enumerate(indices) if x not in skip], dtype=np.int64)
        self._allowed = allowed if allowed.size else np.arange(len(records))
        self._order = self._rng.permutation(self._allowed)
        self._pos = 0
        self.drawn: list[int] = []  # record positions, in draw order

    def draw(self, count: int) -> list[dict[str, Any]]:
        """`count` rows for `AdaWorker.ada_begin`, each with a fresh uid and this step's global_steps."""
        rows = []
        for _ in range(count):
            if self._pos == self._order.size:
                self._order, self._pos = self._rng.permutation(self._allowed), 0
            position = int(self._order[self._pos])
            self._pos += 1
            self.drawn.append(position)
            row = dataset_row(self._records[position], self._prompt_key)
            row["uid"] = self._new_uid()
            row["global_steps"] = self._step
            rows.append(row)
        return rows


@dataclass(frozen=True)
class DapoCommit:
    """What happens to each slot's prompt key in TransferQueue after a DAPO step (see the docstring)."""

    publish: list[int]  # kept: the group goes to TransferQueue, the prompt key is "finished"
    fill: list[int]  # at the cap (on_cap="short"): "finished" with no trajectories, to make up the count
    drop: list[int]  # prompt key cleared, nothing published


def plan_dapo_commit(included: Sequence[bool], registered: int, target: int) -> DapoCommit:
    """Slots [0, registered) are the trainer's batch, the rest refills; `included` is the core's choice.

    Afterwards exactly `target` prompt keys are terminal: the kept ones and, if fewer than `target` were
    kept, the first dropped dataloader prompts as fillers.
    """
    kept = [s for s, inc in enumerate(included) if inc]
    if len(kept) > target:
        raise ValueError(f"{len(kept)} groups kept for a batch of {target} prompts")
    if registered != target:
        raise ValueError(f"the trainer registered {registered} prompts but the batch has {target}")
    if not kept:
        raise DapoCapExceeded(
            f"no mixed group among {len(included)} prompts: the update batch would be empty (verl's replay "
            "buffer cannot sample it); raise max_num_gen_batches or check the data and reward"
        )
    dropped_original = [s for s in range(registered) if not included[s]]
    fill = dropped_original[: target - len(kept)]
    taken = set(kept) | set(fill)
    return DapoCommit(
        publish=kept,
        fill=fill,
        drop=[s for s in range(len(included)) if s not in taken],
    )


def slot_keys(rows: Sequence[Mapping[str, Any]]) -> list[Hashable]:
    """The sampler's prompt id per row: the dataset index, else the uid (as the manager names its slots)."""
    return [str(row.get("index", row["uid"])) for row in rows]
