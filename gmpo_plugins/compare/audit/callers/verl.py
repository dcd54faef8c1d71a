"""verl: ``core_algos.get_policy_loss_fn(call)`` with an ``FSDPActorConfig`` carrying the
fields, ``global_batch_info`` filled as verl's ``ppo_loss`` fills it (dp_size, the global
mini-batch's sequences ``ppo_mini_batch_size * n``, its valid tokens, ``loss_scale_factor``),
advantages laid out per token (B, T) as verl's GRPO advantage estimator gives them.

verl's engine calls ``backward`` on each micro-batch's loss unscaled (the global counts do
the normalisation); FSDP averages the ranks' gradients. Metrics: ``actor/pg_clipfrac`` ->
``clip_frac`` (verl counts clipped tokens on both sides), ``actor/ppo_kl`` -> ``ppo_kl``.

Rollout corrections (``audit.corrections``): ``correction`` runs verl's
``rollout_corr_helper.compute_rollout_correction_and_rejection_mask``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from gmpo_plugins.compare.audit.batches import Part
from gmpo_plugins.compare.audit.translations import Reference, sections

METRICS = {"actor/pg_clipfrac": "clip_frac", "actor/ppo_kl": "ppo_kl"}
_CONFIGS: dict[tuple, Any] = {}


def actor_config(call: str, settings: Mapping[str, Any]) -> Any:
    """verl's actor config for the loss ``call`` with ``settings`` (cached: verl's configs are frozen);
    ``policy_loss.<field>`` settings go to its ``PolicyLossConfig``."""
    key = (call, tuple(sorted(settings.items())))
    if key not in _CONFIGS:
        from verl.workers.config import FSDPActorConfig, PolicyLossConfig

        top, nested = sections(settings)
        unknown = sorted(set(nested) - {"policy_loss"})
        if unknown:
            raise ValueError(f"verl: settings: nested config sections must be 'policy_loss', got {unknown}")
        _CONFIGS[key] = FSDPActorConfig(
            strategy="fsdp",
            rollout_n=1,
            ppo_micro_batch_size_per_gpu=1,
            policy_loss=PolicyLossConfig(loss_mode=call, **nested.get("policy_loss", {})),
            **top,
        )
    return _CONFIGS[key]


def micro_loss(reference: Reference, settings: Mapping[str, Any], part: Part) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch through verl's policy-loss function (module docstring)."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    config = actor_config(reference.call, settings)
    config.global_batch_info.update(
        dp_size=part.ranks,
        global_batch_size=part.global_rows,
        batch_num_tokens=part.global_tokens,
        loss_scale_factor=config.loss_scale_factor,
    )
    mask = part.take(part.case.mask)
    advantages = part.take(part.case.advantages)[:, None] * mask
    loss, metrics = get_policy_loss_fn(reference.call)(
        old_log_prob=part.take(part.case.old_log_probs),
        log_prob=part.take(part.log_probs),
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
        rollout_is_weights=None,
    )
    return loss, {METRICS[key]: float(value) for key, value in metrics.items() if key in METRICS}


def correction(
    settings: Mapping[str, Any], old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(factor, counted) (B, T) of verl's own rollout correction (``audit.corrections``):
    ``compute_rollout_correction_and_rejection_mask``, what verl's trainer runs in decoupled mode
    (``compute_rollout_correction_and_add_to_batch``: IS weights to the loss, rejections out of
    the response mask), with ``settings`` the fields of ``algorithm.rollout_correction``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    response_mask = mask.to(old_log_probs.dtype)
    weights, new_mask, _ = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old_log_probs, rollout_log_prob=rollout_log_probs, response_mask=response_mask, **settings
    )
    factor = new_mask if weights is None else weights.batch["rollout_is_weights"] * new_mask
    return factor, new_mask > 0
