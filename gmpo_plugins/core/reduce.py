"""Masked reductions and the batch normalisation shared by every loss.

All functions take a boolean ``mask`` (B, T) and never branch on tensor values, so
they stay free of host-device synchronisation.
"""

from __future__ import annotations

from typing import Final, get_args

import torch

from gmpo_plugins.core.types import BatchInfo, Reduction

TOKEN_MEAN: Final = "token-mean"
SEQ_MEAN_TOKEN_MEAN: Final = "seq-mean-token-mean"
SEQ_MEAN_TOKEN_SUM_NORM: Final = "seq-mean-token-sum-norm"
REDUCTIONS: tuple[Reduction, ...] = get_args(Reduction)


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``sum(values where mask)``; masked-out entries (even NaN/inf padding) contribute 0."""
    kept = torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``sum(values where mask) / max(1, count(mask))``; 0 where nothing is valid."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(values, mask, dim) / count.clamp_min(1).to(values.dtype)


def masked_min(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Minimum over valid entries; 0 when there is none."""
    inf = torch.full((), float("inf"), dtype=values.dtype, device=values.device)
    low = torch.where(mask, values, inf).amin()
    return torch.where(mask.any(), low, torch.zeros_like(low))


def masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Maximum over valid entries; 0 when there is none."""
    return -masked_min(-values, mask)


def require_global_count(batch: BatchInfo, field: str) -> None:
    """Raise ValueError naming ``batch.<field>`` when it is missing and ``dp_size > 1``.

    Without the global count, a rank can only divide by its local count; the ranks' local
    counts differ in general, so averaging their gradients would not give the mean over the
    global batch (verl's ``agg_loss`` refuses this case too). With ``dp_size == 1`` the
    micro-batch is taken as the whole batch (a plain local mean).
    """
    if batch.dp_size > 1:
        raise ValueError(
            f"batch.{field} is required when batch.dp_size > 1 (got dp_size={batch.dp_size}, {field}=None): "
            "a local mean on each rank does not average to the global-batch mean; pass the count over all "
            "ranks and micro-batches of the optimizer step"
        )


def reduce_sequences(seq_loss: torch.Tensor, rows: torch.Tensor, batch: BatchInfo) -> torch.Tensor:
    """Micro-batch loss from per-sequence losses.

    seq_loss (B,) float, rows (B,) bool (sequences with at least one valid token).

        loss = sum_i rows_i * L_i / N * dp_size

    with ``N = batch.global_batch_size``, or, with ``dp_size == 1`` and no global count,
    ``N = count(rows)`` (a local mean); ``dp_size > 1`` without it raises ValueError.
    """
    total = masked_sum(seq_loss, rows)
    if batch.global_batch_size is None:
        require_global_count(batch, "global_batch_size")
        return total / rows.sum().clamp_min(1).to(total.dtype)
    return total * batch.dp_size / batch.global_batch_size


def reduce_tokens(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    batch: BatchInfo,
    reduction: Reduction,
    norm_length: int | None = None,
) -> torch.Tensor:
    """Micro-batch loss from per-token losses (B, T) under one of ``REDUCTIONS``.

    token-mean               sum_{i,t} m l / M * dp_size            (DAPO; M = global tokens)
    seq-mean-token-mean      sum_i [sum_t m l / |o_i|] / N * dp_size (GRPO)
    seq-mean-token-sum-norm  sum_i [sum_t m l / L] / N * dp_size     (Dr.GRPO; L = norm_length,
                                                                      a constant)
    Missing global counts: local means with ``dp_size == 1``, ValueError otherwise
    (``require_global_count``).
    """
    if reduction == TOKEN_MEAN:
        total = masked_sum(token_loss, mask)
        if batch.global_num_tokens is None:
            require_global_count(batch, "global_num_tokens")
            return total / mask.sum().clamp_min(1).to(total.dtype)
        return total * batch.dp_size / batch.global_num_tokens
    rows = mask.any(-1)
    if reduction == SEQ_MEAN_TOKEN_MEAN:
        return reduce_sequences(masked_mean(token_loss, mask, dim=-1), rows, batch)
    if reduction == SEQ_MEAN_TOKEN_SUM_NORM:
        if norm_length is None:
            raise ValueError("reduction 'seq-mean-token-sum-norm' needs norm_length (a constant length)")
        return reduce_sequences(masked_sum(token_loss, mask, dim=-1) / norm_length, rows, batch)
    raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")
