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
TOKEN_SUM: Final = "token-sum"
SEQ_MEAN_TOKEN_SUM: Final = "seq-mean-token-sum"
REDUCTIONS: tuple[Reduction, ...] = get_args(Reduction)


def as_bool_mask(mask: torch.Tensor) -> torch.Tensor:
    """``mask`` as a bool tensor: itself when it is one, ``mask != 0`` for a 0/1 float or int mask."""
    return mask if mask.dtype == torch.bool else mask != 0


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


SEQUENCE: Final = "sequence"
"""The reduction of a sequence-level loss (``row_weights``): one value per sequence, averaged
over sequences."""


def row_weights(
    count: torch.Tensor,
    rows: torch.Tensor,
    batch: BatchInfo,
    reduction: Reduction | str,
    norm_length: int | None = None,
) -> torch.Tensor:
    """u (B,): a batch reduction as weights of the rows, ``loss = sum_i u_i * v_i``.

    count (B,) valid tokens per row, rows (B,) 1.0 where count > 0 else 0.0, both float.
    With N, M the global sequence and token counts of ``batch`` and D its ``dp_size``:

        sequence                 v_i = L_i (a per-sequence loss)   u_i = rows_i / N * D
        token-mean               v_i = S_i (a row's token sum)     u_i = 1 / M * D
        seq-mean-token-mean      v_i = S_i                         u_i = rows_i / |o_i| / N * D
        seq-mean-token-sum-norm  v_i = S_i                         u_i = rows_i / L / N * D
        token-sum                v_i = S_i                         u_i = D
        seq-mean-token-sum       v_i = S_i                         u_i = rows_i / N * D

    (L = ``norm_length``, a constant). ``token-sum`` needs no count: each micro-batch's sum
    adds up to the micro-batch's share of the whole-batch sum, and the factor D undoes the
    ranks' gradient average, so any split gives the gradient of the whole batch's token sum
    (whose size grows with the batch: the learning rate then depends on the batch size).
    A missing global count is the local one with ``dp_size == 1`` (N = sum_i rows_i: rows
    without a valid token do not count; M = sum_i count_i) and a ValueError otherwise
    (``require_global_count``); a given N counts what the caller counted (frameworks: every
    sequence, rows without a valid token included).
    """
    if reduction == TOKEN_MEAN:
        if batch.global_num_tokens is None:
            require_global_count(batch, "global_num_tokens")
            return torch.ones_like(count) / count.sum().clamp_min(1)
        return torch.full_like(count, batch.dp_size) / batch.global_num_tokens
    if reduction == TOKEN_SUM:
        return torch.full_like(count, batch.dp_size)
    if reduction in (SEQUENCE, SEQ_MEAN_TOKEN_SUM):
        per_row = rows
    elif reduction == SEQ_MEAN_TOKEN_MEAN:
        per_row = rows / count.clamp_min(1)
    elif reduction == SEQ_MEAN_TOKEN_SUM_NORM:
        if norm_length is None:
            raise ValueError("reduction 'seq-mean-token-sum-norm' needs norm_length (a constant length)")
        per_row = rows / norm_length
    else:
        raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")
    if batch.global_batch_size is None:
        require_global_count(batch, "global_batch_size")
        return per_row / rows.sum().clamp_min(1)
    return per_row * batch.dp_size / batch.global_batch_size  # a count given as a tensor divides in per_row's dtype


def reduce_sequences(seq_loss: torch.Tensor, rows: torch.Tensor, batch: BatchInfo) -> torch.Tensor:
    """Micro-batch loss from per-sequence losses.

    seq_loss (B,) float, rows (B,) bool (sequences with at least one valid token).

        loss = sum_i rows_i * L_i / N * dp_size

    with ``N = batch.global_batch_size``, or, with ``dp_size == 1`` and no global count,
    ``N = count(rows)`` (a local mean); ``dp_size > 1`` without it raises ValueError.
    """
    flags = rows.to(seq_loss.dtype)
    return masked_sum(seq_loss * row_weights(flags, flags, batch, SEQUENCE), rows)


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
    token-sum                sum_{i,t} m l * dp_size
    seq-mean-token-sum       sum_i [sum_t m l] / N * dp_size
    Missing global counts: local means with ``dp_size == 1``, ValueError otherwise
    (``require_global_count``).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")
    sums = masked_sum(token_loss, mask, dim=-1)
    count = mask.sum(-1).to(sums.dtype)
    return torch.dot(sums, row_weights(count, (count > 0).to(sums.dtype), batch, reduction, norm_length))
