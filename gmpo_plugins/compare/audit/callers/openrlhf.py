"""OpenRLHF: ``openrlhf.models.loss.PolicyLoss`` built with the fields (as ``ActorPPOTrainer``
builds it from ``--actor.policy_loss_type``, ``--actor.eps_clip_low_high``,
``--actor.loss_agg_mode``), called as ``training_step`` calls it.

OpenRLHF's trainer gives every micro-batch of an optimizer step the step's counts divided by
the accumulation steps gas (``loss_utils.iter_grad_accum_global_norm``: valid tokens and
sequences with a valid token, summed over the micro-batches and ranks), DeepSpeed scales each
backward loss by 1 / gas and averages the ranks' gradients. Advantages are laid out per token
(B, T), the action mask is int64. Metrics: the returned clip ratio -> ``clip_frac``,
``ppo_kl``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from gmpo_plugins.compare.audit.batches import Part
from gmpo_plugins.compare.audit.translations import Reference


def micro_loss(reference: Reference, settings: Mapping[str, Any], part: Part) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch through OpenRLHF's PolicyLoss (module docstring)."""
    from openrlhf.models.loss import PolicyLoss

    module = PolicyLoss(policy_loss_type=reference.call, **settings)
    mask = part.take(part.case.mask).to(torch.long)
    gas = part.micro
    loss, clip_ratio, ppo_kl, _, _ = module(
        part.take(part.log_probs),
        part.take(part.case.old_log_probs),
        part.take(part.case.advantages)[:, None] * mask,
        action_mask=mask,
        rollout_log_probs=None,
        dp_size=part.ranks,
        batch_num_tokens=torch.tensor(part.global_tokens / gas, dtype=torch.float32),
        global_batch_size=torch.tensor(part.nonempty_rows / gas, dtype=torch.float32),
    )
    return loss / gas, {"clip_frac": float(clip_ratio), "ppo_kl": float(ppo_kl)}


def correction(
    settings: Mapping[str, Any], old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(factor, counted) (B, T) of OpenRLHF's own train/rollout IS correction (``audit.corrections``):
    ``PolicyLoss(policy_loss_type="ppo", **settings)`` with ``settings`` its ``is_correction_*``
    fields, called at ratio 1 (``log_probs = old_log_probs``) with unit advantages, so each
    token's loss is ``-coef_t``: its factor is read from the gradient of the token-mean loss with
    respect to the advantages, ``coef_t = -N dL/dA_t`` (N the valid tokens). The count is the
    action mask: OpenRLHF multiplies the loss by 0 and never edits the mask."""
    from openrlhf.models.loss import PolicyLoss

    module = PolicyLoss(policy_loss_type="ppo", **settings)
    action_mask = mask.to(torch.long)
    advantages = action_mask.to(old_log_probs.dtype).requires_grad_(True)
    tokens = action_mask.sum().to(old_log_probs.dtype)
    loss = module(
        old_log_probs,
        old_log_probs,
        advantages,
        action_mask=action_mask,
        rollout_log_probs=rollout_log_probs,
        batch_num_tokens=tokens,
    )[0]
    (gradient,) = torch.autograd.grad(loss, advantages)
    return -gradient * tokens, mask.bool()
