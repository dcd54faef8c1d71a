"""Liger-Kernel: ``LigerFusedLinearGRPOLoss(**fields)`` (not compiled, beta 0, no reference
model) from hidden states and an lm_head weight, so its own forward computes the log-probs.

Each token's log-prob l is realised exactly by a two-word vocabulary and a one-wide hidden
state: weight W = [[1], [0]], hidden h = l - log(1 - e^l), selected token 0, so
log_softmax([h, 0])[0] = log sigmoid(h) = l and dl/dh = 1 - e^l; the gradient with respect to
l is Liger's gradient with respect to h divided by 1 - e^l. Log-probs must be < 0, so every
token's current and old log-probs are shifted by one amount s_t = -max(l_t, old_t) - 1 (the
loss depends on their difference only; padding is set to -1).

Liger-Kernel has no trainer of its own; its ``num_items_in_batch`` is TRL's, so micro-batches
are accumulated as TRL's trainer accumulates them: each micro-batch loss divided by the
accumulation steps G (grpo, dr_grpo, bnpo); dapo divides by ``num_items_in_batch`` (the
generation batch's valid tokens over all ranks) over the world size, which is 1 in this
process, so the caller passes the valid tokens / ranks; ranks averaged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from gmpo_plugins.compare.audit.batches import Part
from gmpo_plugins.compare.audit.translations import Reference

_PER_MICRO_BATCH_MEAN = ("grpo", "bnpo", "dr_grpo", "sapo", "luspo")


def shifted(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(current, old) log-probs shifted per token below 0 (module docstring); padding -1."""
    shift = -torch.maximum(log_probs.detach(), old_log_probs) - 1.0
    current = torch.where(mask, log_probs + shift, torch.full_like(log_probs, -1.0))
    old = torch.where(mask, old_log_probs + shift, torch.full_like(old_log_probs, -1.0))
    return current, old


def micro_loss(reference: Reference, settings: Mapping[str, Any], part: Part) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch through Liger-Kernel's fused GRPO loss (module docstring)."""
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    mask = part.take(part.case.mask)
    current, old = shifted(part.take(part.log_probs), part.take(part.case.old_log_probs), mask)
    hidden = LogProbToHidden.apply(current)
    weight = torch.tensor([[1.0], [0.0]], dtype=current.dtype)
    module = LigerFusedLinearGRPOLoss(
        beta=0.0, compiled=False, use_ref_model=False, chunk_size=len(part.rows), **settings
    )
    loss, metrics = module(
        hidden,
        weight,
        torch.zeros(mask.shape, dtype=torch.long),
        mask.long(),
        part.take(part.case.advantages),
        old_per_token_logps=old,
        num_items_in_batch=torch.tensor(float(part.global_tokens / part.ranks)),
    )
    if settings.get("loss_type", "dapo") in _PER_MICRO_BATCH_MEAN:
        loss = loss / part.micro
    return loss, {}


class LogProbToHidden(torch.autograd.Function):
    """h = l - log(1 - e^l), (B, T) -> (B, T, 1), with dh/dl = 1 / (1 - e^l) that
    makes Liger's dL/dh chain back to the log-probs (module docstring)."""

    @staticmethod
    def forward(ctx: Any, log_probs: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(log_probs)
        return (log_probs - torch.log(-torch.expm1(log_probs))).unsqueeze(-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (log_probs,) = ctx.saved_tensors
        return grad.squeeze(-1) / (-torch.expm1(log_probs))
