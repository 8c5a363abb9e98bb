"""Reinforce-Ada's advantage as a verl 0.9.1 advantage estimator (`algorithm.adv_estimator=reinforce_ada`).

Why a custom estimator: Reinforce-Ada keeps only n responses per prompt for the update but baselines
them against the mean reward of the prompt's WHOLE pool (METHODS.md, Seq step 6), and Est multiplies by
a per-prompt residual weight. verl only hands an estimator the kept rows (token_level_rewards,
response_mask, uid), so the pool statistics come from `repro.verl_plugin.pool_stats`, filled by the
Reinforce-Ada rollout manager in the same process. verl's own `grpo` would use the kept group's mean and
std instead, which is exactly what the paper argues against.

verl reaches this function from `PPOTrainer._compute_advantage` via
`v1.utils.compute_advantage_for_multi_trajectories` -> `ray_trainer.compute_advantage` (any estimator
other than "grpo" is delegated) -> `core_algos.get_adv_estimator_fn(name)(token_level_rewards=...,
response_mask=..., config=<algorithm config>, index=<uid array>)`.

Importing this module registers the estimator with verl's registry and does nothing else.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import register_adv_est

from repro.verl_plugin import audit, pool_stats

__all__ = ["ADV_ESTIMATOR", "MANAGER_CONFIG_KEY", "compute_reinforce_ada_advantage", "global_std_norm_enabled"]

ADV_ESTIMATOR = "reinforce_ada"
MANAGER_CONFIG_KEY = "actor_rollout_ref.rollout.agent.agent_loop_manager_class"
PAD_UID_PREFIX = "pad"  # verl.trainer.ppo.padding_utils names its synthetic rows f"pad{uuid4().hex}"

logger = logging.getLogger(__name__)


def _config_get(config: Any, key: str) -> Any:
    """`config.get(key)` for a DictConfig, dict or verl BaseConfig; attribute access otherwise; None if absent."""
    if config is None:
        return None
    if hasattr(config, "get"):
        return config.get(key, None)
    return getattr(config, key, None)


def global_std_norm_enabled(config: Any) -> bool:
    """Whether `<algorithm config>.reinforce_ada.global_std_norm` is set (the std ablation; default off).

    With pools of up to 32 responses, 1/(std + eps) explodes on nearly uniform pools, so the paper's
    method does not divide; the knob exists only for the ablation.
    """
    return bool(_config_get(_config_get(config, "reinforce_ada"), "global_std_norm") or False)


def _uid_strings(index: Any) -> list[str]:
    return [u.decode() if isinstance(u, bytes | bytearray) else str(u) for u in index]


# A module reload (importlib.reload, a notebook re-run) defines a new function object, which verl's
# register_adv_est would reject as a conflicting registration. Drop our own stale entry first; a
# different estimator registered under the same name still makes verl raise, as it should.
_stale = core_algos.ADV_ESTIMATOR_REGISTRY.get(ADV_ESTIMATOR)
if (
    _stale is not None
    and getattr(_stale, "__module__", None) == __name__
    and getattr(_stale, "__qualname__", None) == "compute_reinforce_ada_advantage"
):
    del core_algos.ADV_ESTIMATOR_REGISTRY[ADV_ESTIMATOR]
del _stale


@register_adv_est(ADV_ESTIMATOR)
def compute_reinforce_ada_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    epsilon: float = 1e-6,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A_i = (r_i - mean(pool of uid_i)) * w(uid_i), broadcast over the response's tokens.

    Args:
        token_level_rewards: (B, L) rewards; a response's score r_i is their sum (outcome reward).
        response_mask: (B, L) 1 on response tokens.
        index: (B,) prompt uid of each row, the key the rollout manager used in `pool_stats.record`.
        config: verl's algorithm config (DictConfig, dict, AlgoConfig or None). When
            `config.reinforce_ada.global_std_norm` is true, A_i is also divided by (pool std + epsilon).
        epsilon: added to the pool std in the ablation only.
        **kwargs: whatever else verl passes (e.g. reward_baselines); ignored.

    Returns:
        (advantages, returns), both (B, L) and equal, as verl's outcome estimators return them.
        Rows whose uid is unknown to the store (verl's "pad..." rows) get 0.

    Raises:
        RuntimeError: if more than half of the non-padding rows are unknown: the rollout manager that
            fills the store was not the Reinforce-Ada one, so the baseline would silently be wrong.
    """
    uids = _uid_strings(index)
    if len(uids) != token_level_rewards.shape[0]:
        raise ValueError(f"index has {len(uids)} uids for {token_level_rewards.shape[0]} rows")
    mean, weight, std, known = pool_stats.lookup_many(uids)
    real = np.array([not u.startswith(PAD_UID_PREFIX) for u in uids], dtype=bool)
    missing = real & ~known
    if 2 * int(missing.sum()) > int(real.sum()):
        example = next(u for u, m in zip(uids, missing, strict=True) if m)
        raise RuntimeError(
            f"reinforce_ada advantage: {int(missing.sum())} of {int(real.sum())} rows have no pool statistics "
            f"(e.g. uid {example!r}; the store holds {pool_stats.size()} prompts). The pool statistics are "
            f"recorded by the Reinforce-Ada rollout manager: set {MANAGER_CONFIG_KEY} to it when "
            f"algorithm.adv_estimator={ADV_ESTIMATOR}."
        )
    if missing.any():
        logger.warning("reinforce_ada advantage: %d rows without pool statistics get advantage 0", missing.sum())

    with torch.no_grad():
        device = token_level_rewards.device
        scores = token_level_rewards.sum(dim=-1).to(torch.float64)
        centred = scores - torch.as_tensor(mean, dtype=torch.float64, device=device)
        if global_std_norm_enabled(config):
            centred = centred / (torch.as_tensor(std, dtype=torch.float64, device=device) + epsilon)
        per_row = centred * torch.as_tensor(weight, dtype=torch.float64, device=device)
        per_row = torch.where(torch.as_tensor(known, device=device), per_row, torch.zeros_like(per_row))
        advantages = per_row.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask.to(token_level_rewards.dtype)
    if audit.updates_enabled():
        audit.append(
            "update",
            {
                "uid": uids,
                "score": scores.tolist(),
                "pool_mean": mean.tolist(),
                "weight": weight.tolist(),
                "known": known.tolist(),
                "advantage": per_row.tolist(),
            },
        )
    return advantages, advantages
