"""One PPO update on CPU with verl's own loss code: clipped surrogate, token-mean aggregation, entropy bonus, and
for a batch sampled by older weights verl's truncated importance weights (`rollout_correction`).

Only the plumbing is ours; `get_policy_loss_fn("vanilla")` and `agg_loss` are verl's, configured by a real
`verl.workers.config.ActorConfig`, so the CPU path optimises exactly the objective the GPU path does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from repro.cpu_lm.generate import Batch, response_logprobs


@dataclass(frozen=True)
class PPOSettings:
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    entropy_coeff: float = 1e-4
    loss_agg_mode: str = "token-mean"
    grad_clip: float = 1.0


def actor_config(settings: PPOSettings, mini_batch: int, rollout_n: int):
    from verl.workers.config import ActorConfig

    return ActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=mini_batch,
        ppo_micro_batch_size_per_gpu=mini_batch,
        rollout_n=rollout_n,
        clip_ratio=settings.clip_ratio_low,
        clip_ratio_low=settings.clip_ratio_low,
        clip_ratio_high=settings.clip_ratio_high,
        entropy_coeff=settings.entropy_coeff,
        loss_agg_mode=settings.loss_agg_mode,
        use_kl_loss=False,
    )


def select(batch: Batch, rows: torch.Tensor) -> Batch:
    return Batch(
        batch.input_ids[rows],
        batch.attention_mask[rows],
        batch.position_ids[rows],
        batch.response_mask[rows],
        batch.prompt_len,
    )


def ppo_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    advantages: torch.Tensor,
    old_log_prob: torch.Tensor,
    config,
    settings: PPOSettings,
    rollout_is_weights: torch.Tensor | None = None,
) -> dict[str, float]:
    """One optimizer step on one mini-batch; returns verl-named actor metrics. `rollout_is_weights` (async
    schedule) multiply the per-token policy loss inside verl's loss function, as verl applies them."""
    from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn

    model.train()
    log_prob, entropy = response_logprobs(model, batch, with_entropy=True, share_prompts=True)
    mask = batch.response_mask
    pg_loss, pg_metrics = get_policy_loss_fn("vanilla")(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=settings.loss_agg_mode,
        config=config,
        rollout_is_weights=rollout_is_weights,
    )
    entropy_loss = agg_loss(loss_mat=entropy, loss_mask=mask, loss_agg_mode=settings.loss_agg_mode)
    loss = pg_loss - settings.entropy_coeff * entropy_loss
    optimizer.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
    optimizer.step()
    model.eval()
    return {
        "actor/pg_loss": float(pg_loss.detach()),
        "actor/entropy": float(entropy_loss.detach()),
        "actor/grad_norm": float(grad_norm),
        **{k: float(v) for k, v in pg_metrics.items()},
    }


def rollout_correction(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's truncated importance weights pi_now / pi_sampling per token (rollout_is=token, threshold 2.0,
    verl's defaults for algorithm.rollout_correction) and its rollout_corr/* metrics."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    weights, _mask, metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob, rollout_log_prob, response_mask, rollout_is="token", rollout_is_threshold=2.0
    )
    return weights.batch["rollout_is_weights"], {k: float(v) for k, v in metrics.items()}  # named rollout_corr/*
