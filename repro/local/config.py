"""The resolved configuration of a CPU run: the paper's settings from the catalog, scaled for a CPU.

Every value that differs from the paper is listed under `scaled` with the paper's value and the reason,
so a reader of config.yaml can tell the miniature from the real thing at a glance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from repro import arithmetic, catalog
from repro.catalog import Setting
from repro.errors import ReproError
from repro.tasks.tiny_arith import TIERS

HELDOUT_MAX_PER_TIER = min(int(t["size"]) for t in TIERS.values())


@dataclass(frozen=True)
class CpuTrainConfig:
    train_prompt_batch_size: int
    ppo_mini_batch_size: int
    total_training_steps: int
    lr: float
    lr_warmup_steps: int
    weight_decay: float
    grad_clip: float
    clip_ratio_low: float
    clip_ratio_high: float
    entropy_coeff: float
    loss_agg_mode: str
    temperature: float
    top_p: float
    max_prompt_length: int
    max_response_length: int
    save_freq: int = 10
    threads: int = 2
    # held-out accuracy (repro.local.heldout): steps between evaluations (0 = off), problems per test
    # tier (4 tiers), responses per problem; 64 x 4 responses cost a fraction of one training step
    eval_every: int = 10
    heldout_per_tier: int = 16
    heldout_samples: int = 4
    # beyond the paper: generate step t+1 with the weights before update t, in a thread while update t runs
    # (one step stale, importance-corrected as verl's async trainers do); `repro run --async`
    async_rollout: bool = False
    # a generation budget (0 = none): the run ends at the first step whose cumulative generated tokens reach it,
    # total_training_steps being then only a cap; a compute-matched baseline (`repro run --until-tokens`)
    until_tokens: int = 0
    # token counts whose first step's checkpoint is kept whatever save_freq says: the points at which a
    # compute-matched comparison or a curve against tokens reads the run
    keep_tokens: list[int] = field(default_factory=list)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Setting], overrides: dict[str, Any]) -> CpuTrainConfig:
        """The resolved cell's hyperparameters (its CPU scaling over the paper's values), then `overrides`."""
        values: dict[str, Any] = {f.name: settings[f.name].value for f in fields(cls) if f.name in settings}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ReproError(f"unknown training setting(s) {unknown}; valid: {', '.join(sorted(known))}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        missing = [
            f.name
            for f in fields(cls)
            if f.name not in values and f.default is MISSING and f.default_factory is MISSING
        ]
        if missing:
            raise ReproError(f"settings {missing} have no value in the catalog; report this as a bug")
        for f in fields(cls):
            if f.name not in values:
                continue
            expected = {"int": int, "float": float, "str": str, "bool": bool}.get(str(f.type))
            value = values.get(f.name)
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                values[f.name] = float(value)
            elif expected and not isinstance(values.get(f.name), expected):
                raise ReproError(f"training setting {f.name} must be {f.type}, got {value!r}")
        cfg = cls(**values)
        if cfg.train_prompt_batch_size % cfg.ppo_mini_batch_size:
            raise ReproError(
                f"--batch {cfg.train_prompt_batch_size} must be a multiple of the PPO mini-batch "
                f"{cfg.ppo_mini_batch_size}; pick e.g. --batch {cfg.ppo_mini_batch_size * 4}"
            )
        if cfg.eval_every < 0 or cfg.heldout_samples < 1 or not 1 <= cfg.heldout_per_tier <= HELDOUT_MAX_PER_TIER:
            raise ReproError(
                f"held-out evaluation needs eval_every >= 0 (0 = off), heldout_samples >= 1 and 1 <= heldout_per_tier "
                f"<= {HELDOUT_MAX_PER_TIER} (the smallest test tier); got {cfg.eval_every}, {cfg.heldout_samples}, "
                f"{cfg.heldout_per_tier}"
            )
        if not isinstance(cfg.keep_tokens, list) or not all(isinstance(t, int) and t > 0 for t in cfg.keep_tokens):
            raise ReproError(f"keep_tokens must be a list of token counts > 0, got {cfg.keep_tokens!r}")
        if cfg.until_tokens < 0:
            raise ReproError(f"until_tokens must be a number of tokens >= 0 (0 = no budget), got {cfg.until_tokens}")
        if cfg.temperature != 1.0 or cfg.top_p != 1.0:
            raise ReproError("the CPU sampler implements temperature 1.0 / top-p 1.0 only (the paper's setting)")
        return cfg


@dataclass
class RunConfig:
    """Everything that defines a run; written to config.yaml and compared on resume."""

    backbone: str
    method: str
    prompt_set: str
    seed: int
    train: CpuTrainConfig
    sampler: dict[str, Any]
    model: dict[str, Any]
    data: dict[str, Any]
    path: str = "cpu"
    scaled: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["train"] = asdict(self.train)
        out["arithmetic"] = arithmetic.fingerprint()  # a resume under another arithmetic is another run
        if not self.train.async_rollout:  # a sync run's config reads as before the option existed (resumable)
            del out["train"]["async_rollout"]
        return out


def scaled_record(train: CpuTrainConfig, scaled: Mapping[str, Setting]) -> dict[str, dict[str, Any]]:
    """Each value the CPU scaling changes (the resolved cell's `scaled`): the paper's, the CPU's, and why."""
    shared = catalog.hyperparameters()
    out = {}
    for name, setting in scaled.items():
        paper = shared[name].value if name in shared else None
        out[name] = {"paper": paper, "cpu": getattr(train, name), "why": setting.source}
    return out
