"""Per-prompt pool statistics handed from the Reinforce-Ada rollout manager to the advantage estimator.

Why a process-local store: verl 0.9.1's v1 trainer computes advantages from a fixed list of fields it
fetches from TransferQueue (uid, response_mask, rm_scores, ...), so extra per-response fields written by
a rollout manager never reach the estimator. The rollout manager, the trainer and the estimator all run
in the same Ray process (TaskRunnerV1), so the rollout manager records each prompt's pool statistics
here, keyed by the prompt's `uid` string, and the estimator looks them up by the `uid` it does receive.

The store is a module-level dict behind a lock (the rollout manager may record from another thread than
the one computing advantages). `forget_before(step)` keeps memory bounded over a long run. numpy only:
no torch or verl import, so the rollout side and tests can use it cheaply.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PoolStat", "clear", "dump", "forget_before", "load", "lookup", "lookup_many", "record", "size"]


@dataclass(frozen=True)
class PoolStat:
    """What the update needs about one prompt's whole pool S_x (not only its kept group).

    pool_mean: mean reward over all of S_x, the global baseline of Reinforce-Ada (METHODS.md, Seq step 6).
    pool_size: |S_x|, responses drawn for the prompt in this step.
    weight: Est's residual weight w_x (1 for Seq).
    pool_std: unbiased (ddof=1) std of the rewards of S_x, 0 for a single response; used only by the
        `global_std_norm` ablation.
    step: the training step that produced the pool, so old entries can be forgotten.
    """

    pool_mean: float
    pool_size: int
    weight: float = 1.0
    pool_std: float = 0.0
    step: int = 0

    def __post_init__(self) -> None:
        if self.pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {self.pool_size}")
        if not math.isfinite(self.pool_mean):
            raise ValueError(f"pool_mean must be finite, got {self.pool_mean}")
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(f"weight must be finite and >= 0, got {self.weight}")
        if not (math.isfinite(self.pool_std) and self.pool_std >= 0):
            raise ValueError(f"pool_std must be finite and >= 0, got {self.pool_std}")

    @classmethod
    def from_rewards(cls, rewards: Sequence[float] | np.ndarray, weight: float = 1.0, step: int = 0) -> PoolStat:
        """From every reward of the pool: mean and unbiased std as `repro.sampling.advantage.group_stats`."""
        values = np.asarray(rewards, dtype=float).ravel()
        if values.size == 0:
            raise ValueError("a pool needs at least one reward")
        std = float(values.std(ddof=1)) if values.size > 1 else 0.0
        return cls(float(values.mean()), int(values.size), float(weight), std, int(step))


_LOCK = threading.Lock()
_STATS: dict[str, PoolStat] = {}


def _key(uid: object) -> str:
    """verl's uids are str, but may arrive as numpy str_ or bytes after a TensorDict round trip."""
    if isinstance(uid, bytes | bytearray):
        return bytes(uid).decode()
    return str(uid)


def record(stats: Mapping[str, PoolStat]) -> None:
    """Store (or replace) the statistics of some prompts, keyed by prompt uid."""
    items = {}
    for uid, stat in stats.items():
        if not isinstance(stat, PoolStat):
            raise TypeError(f"uid {uid!r}: expected a PoolStat, got {type(stat).__name__}")
        items[_key(uid)] = stat
    with _LOCK:
        _STATS.update(items)


def lookup(uid: str) -> PoolStat | None:
    with _LOCK:
        return _STATS.get(_key(uid))


def lookup_many(uids: Iterable[object]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised lookup for the estimator: (pool_mean, weight, pool_std, known), one entry per uid.

    Unknown uids get mean 0, weight 0, std 0 and known=False; the caller decides what they mean.
    """
    keys = [_key(u) for u in uids]
    with _LOCK:
        found = [_STATS.get(k) for k in keys]
    count = len(keys)
    mean, weight, std = np.zeros(count), np.zeros(count), np.zeros(count)
    known = np.zeros(count, dtype=bool)
    for i, stat in enumerate(found):
        if stat is not None:
            mean[i], weight[i], std[i], known[i] = stat.pool_mean, stat.weight, stat.pool_std, True
    return mean, weight, std, known


def forget_before(step: int) -> int:
    """Drop the statistics of steps older than `step`; returns how many were dropped."""
    with _LOCK:
        old = [uid for uid, stat in _STATS.items() if stat.step < step]
        for uid in old:
            del _STATS[uid]
    return len(old)


def dump() -> dict[str, dict[str, float | int]]:
    """Every entry as plain JSON-able values: an async run saves them with its checkpoint, because verl
    restores the prompts that had finished sampling but were not trained yet, and their update needs them."""
    with _LOCK:
        return {uid: dataclasses.asdict(stat) for uid, stat in _STATS.items()}


def load(entries: Mapping[str, Mapping[str, float | int]]) -> int:
    """Record what `dump` wrote (validated as any PoolStat is); returns how many entries."""
    record({uid: PoolStat(**dict(fields)) for uid, fields in entries.items()})
    return len(entries)


def clear() -> None:
    with _LOCK:
        _STATS.clear()


def size() -> int:
    with _LOCK:
        return len(_STATS)
