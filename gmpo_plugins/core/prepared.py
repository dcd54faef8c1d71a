"""Common first step of every loss: dtype promotion, boolean mask, raw log ratios.

Half-precision inputs are computed in float32; float64 stays float64 (used by the
tests' autograd references). Nothing here branches on tensor values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from gmpo_plugins.core.reduce import masked_mean
from gmpo_plugins.core.types import LossInputs

LOG_RATIO_GUARD = 20.0
"""Default bound on |log ratio| before any exp: e^20 stays finite in fp32 and bf16."""


@dataclass
class PreparedBatch:
    """Tensors in compute dtype. ``log_ratio`` is 0 on padding, ``advantages`` is (B,)
    for sequence-level losses and (B, T) for token-level ones."""

    log_probs: torch.Tensor  # (B, T)
    log_ratio: torch.Tensor  # (B, T) log pi_theta - log pi_old, 0 where mask is False
    advantages: torch.Tensor  # (B,) or (B, T)
    mask: torch.Tensor  # (B, T) bool
    rows: torch.Tensor  # (B,) bool: sequences with at least one valid token
    lengths: torch.Tensor  # (B,) compute dtype: valid tokens per sequence
    ref_log_probs: Optional[torch.Tensor]
    rollout_is_weights: Optional[torch.Tensor]  # (B, T) or (B,), detached


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half types, the dtype itself for float32/float64."""
    return torch.promote_types(dtype, torch.float32)


def prepare(inputs: LossInputs, *, sequence_level: bool) -> PreparedBatch:
    """Promote, mask and derive the shared quantities of one micro-batch."""
    dtype = compute_dtype(inputs.log_probs.dtype)
    mask = inputs.mask if inputs.mask.dtype == torch.bool else inputs.mask != 0
    log_probs = inputs.log_probs.to(dtype)
    raw = log_probs - inputs.old_log_probs.detach().to(dtype)
    log_ratio = torch.where(mask, raw, torch.zeros((), dtype=dtype, device=raw.device))
    lengths = mask.sum(-1).to(dtype)

    advantages = inputs.advantages.detach().to(dtype)
    if advantages.dim() == 1 and not sequence_level:
        advantages = advantages[:, None].expand_as(log_ratio)
    elif advantages.dim() == 2 and sequence_level:
        advantages = masked_mean(advantages, mask, dim=-1)

    def promote(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        return None if t is None else t.detach().to(dtype)

    return PreparedBatch(
        log_probs=log_probs,
        log_ratio=log_ratio,
        advantages=advantages,
        mask=mask,
        rows=mask.any(-1),
        lengths=lengths,
        ref_log_probs=promote(inputs.ref_log_probs),
        rollout_is_weights=promote(inputs.rollout_is_weights),
    )


def sequence_is_weights(batch: PreparedBatch) -> Optional[torch.Tensor]:
    """Rollout importance weights per sequence (B,): the weight itself when given per
    sequence, else the masked token mean."""
    weights = batch.rollout_is_weights
    if weights is None or weights.dim() == 1:
        return weights
    return masked_mean(weights, batch.mask, dim=-1)


def token_is_weights(batch: PreparedBatch) -> Optional[torch.Tensor]:
    """Rollout importance weights per token (B, T), broadcasting per-sequence weights."""
    weights = batch.rollout_is_weights
    if weights is None or weights.dim() == 2:
        return weights
    return weights[:, None].expand_as(batch.log_ratio)
