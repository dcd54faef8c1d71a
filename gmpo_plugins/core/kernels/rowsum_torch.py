"""Torch backend of ``clipped_row_sums``: the forward pass block of rows by block.

Forward, for each row i (B rows, T positions), with r_t = log_probs_t - old_log_probs_t
computed in the compute dtype (float32 for half inputs) and per-row bounds lo_i <= hi_i:

    sum_clipped_i = sum_t m_t * clamp(r_t, lo_i, hi_i)        (differentiable)
    sum_raw_i     = sum_t m_t * r_t
    count_i       = sum_t m_t
    below_i       = sum_t m_t * [r_t < lo_i]
    above_i       = sum_t m_t * [r_t > hi_i]
    raw_min_i     = min_{t: m_t} r_t     (+inf for an empty row)
    raw_max_i     = max_{t: m_t} r_t     (-inf for an empty row)
    active_t      = m_t & lo_i <= r_t <= hi_i                 (bool, saved for backward)

Backward, given g_i = dLoss/dsum_clipped_i (B,):

    grad_log_probs_t = g_i * active_t                          (in the input dtype)

Blocks of about ``BLOCK_ELEMENTS`` elements keep every float temporary small and in
cache, so the extra memory of a call is the 1-byte ``active`` mask, O(B) outputs and
one bounded workspace, and nothing of size (B, T) in float is saved for backward.
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.kernels.stats import compute_dtype

BLOCK_ELEMENTS = 1 << 16  # CPU: a few float temporaries of this size stay in L2 cache
BLOCK_ELEMENTS_ACCELERATOR = 1 << 22  # elsewhere: fewer, larger launches


def rows_per_block(length: int, device: torch.device) -> int:
    """Rows processed together so that one block holds about BLOCK_ELEMENTS elements."""
    elements = BLOCK_ELEMENTS if device.type == "cpu" else BLOCK_ELEMENTS_ACCELERATOR
    return max(1, elements // max(1, length))


def _forward_block(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    mask: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    active: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """Fill ``active`` (rows, T) and the 7 statistics ``out`` (7, rows) of one block."""
    dtype = out.dtype
    m = mask if mask.dtype == torch.bool else mask != 0
    r = log_probs.to(dtype) - old_log_probs.to(dtype)
    lo, hi = lo[:, None], hi[:, None]
    outside = ~m
    torch.ge(r, lo, out=active)
    active &= r <= hi
    active &= m
    torch.sum((r < lo) & m, dim=-1, out=out[3])
    torch.sum((r > hi) & m, dim=-1, out=out[4])
    torch.amin(r.masked_fill(outside, float("inf")), dim=-1, out=out[5])
    torch.amax(r.masked_fill(outside, float("-inf")), dim=-1, out=out[6])
    torch.sum(torch.clamp(r, lo, hi).masked_fill_(outside, 0.0), dim=-1, out=out[0])
    torch.sum(r.masked_fill_(outside, 0.0), dim=-1, out=out[1])
    torch.sum(m, dim=-1, out=out[2])


def forward(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(stats (7, B) in the compute dtype, active (B, T) bool), block of rows by block."""
    batch, length = log_probs.shape
    dtype = compute_dtype(log_probs.dtype)
    out = torch.empty((7, batch), dtype=dtype, device=log_probs.device)
    active = torch.empty((batch, length), dtype=torch.bool, device=log_probs.device)
    lo, hi = lo.to(dtype), hi.to(dtype)
    step = rows_per_block(length, log_probs.device)
    for start in range(0, batch, step):
        rows = slice(start, min(batch, start + step))
        _forward_block(log_probs[rows], old_log_probs[rows], mask[rows], lo[rows], hi[rows], active[rows], out[:, rows])
    return out, active


def backward(active: torch.Tensor, coef: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """grad (B, T) in ``dtype``: coef_i where active, exactly 0 elsewhere (even for an
    infinite coef_i, as autograd through ``torch.where``/``clamp`` gives)."""
    grad = torch.empty(active.shape, dtype=dtype, device=active.device)
    zero = torch.zeros((), dtype=dtype, device=active.device)
    torch.where(active, coef.to(dtype)[:, None], zero, out=grad)
    return grad
