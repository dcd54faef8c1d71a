"""Triton kernels for ``clipped_row_sums`` (CUDA; on CPU only under TRITON_INTERPRET=1).

forward  one program per row: loops over T in blocks, loads log_probs, old_log_probs and
         mask once (half inputs are cast to float32 right after the load), accumulates the
         eight statistics of ``RowSums`` in float32 and writes the 1-byte ``active`` mask.
         The clamp is ``prepared.clamp_or_nan`` spelled in Triton (``_clamp_or_nan``): a valid
         r_t that is NaN or +-inf gives NaN, so the row's clipped sum is NaN as on every other
         path; the min and max of a row with a NaN r_t are NaN, as torch's amin/amax give
         (set from a NaN count: the hardware's fmin/fmax would drop a NaN). Positions outside
         the mask are replaced by 0 before any arithmetic (``tl.where``), as on the torch path.
backward one elementwise pass: grad_t = active_t ? g_i : 0, stored in the input dtype.

Exactly two launches touch (B, T) data per forward+backward. Each launch is a custom
operator (``torch.library.custom_op``: ``gmpo_plugins::clipped_row_sums_forward`` and
``gmpo_plugins::clipped_row_sums_backward``, with shape-only fake implementations), so
``torch.compile`` treats it as one opaque node instead of breaking the graph on it. A
custom op rather than ``torch.library.triton_op``: the latter traces its body, which Triton's
CPU interpreter cannot run on fake tensors, so it could not be tested off a GPU. This module
imports triton at import time;
``gmpo_plugins.core.kernels.dispatch`` imports it only when selected.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FORWARD_BLOCK = 1024
BACKWARD_BLOCK = 1024


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]  # untyped where triton is absent or untyped
def _clamp_or_nan(r, lo, hi):  # type: ignore[no-untyped-def]  # Triton reads the bare arguments
    """``prepared.clamp_or_nan``: clamp(r, lo, hi) where r is finite, NaN where NaN or +-inf."""
    finite = (r == r) & (tl.abs(r) < float("inf"))
    return tl.where(finite, tl.minimum(tl.maximum(r, lo), hi), float("nan"))


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]  # untyped where triton is absent or untyped
def _row_stats_forward(  # type: ignore[no-untyped-def]  # Triton reads annotations (tl.constexpr): args stay bare
    lp_ptr,
    old_ptr,
    mask_ptr,
    lo_ptr,
    hi_ptr,
    active_ptr,
    out_ptr,
    n_rows,
    length,
    lp_stride,
    old_stride,
    mask_stride,
    active_stride,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    lo = tl.load(lo_ptr + row).to(tl.float32)
    hi = tl.load(hi_ptr + row).to(tl.float32)
    acc_clipped = tl.zeros([BLOCK], dtype=tl.float32)
    acc_raw = tl.zeros([BLOCK], dtype=tl.float32)
    acc_count = tl.zeros([BLOCK], dtype=tl.float32)
    acc_below = tl.zeros([BLOCK], dtype=tl.float32)
    acc_above = tl.zeros([BLOCK], dtype=tl.float32)
    acc_min = tl.full([BLOCK], float("inf"), dtype=tl.float32)
    acc_max = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    acc_nonfinite = tl.zeros([BLOCK], dtype=tl.float32)
    acc_nan = tl.zeros([BLOCK], dtype=tl.float32)
    row64 = row.to(tl.int64)
    for start in range(0, length, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < length
        lp = tl.load(lp_ptr + row64 * lp_stride + cols, mask=inside, other=0.0).to(tl.float32)
        old = tl.load(old_ptr + row64 * old_stride + cols, mask=inside, other=0.0).to(tl.float32)
        valid = (tl.load(mask_ptr + row64 * mask_stride + cols, mask=inside, other=0) != 0) & inside
        r = tl.where(valid, lp, 0.0) - tl.where(valid, old, 0.0)  # padding is 0 before any arithmetic
        clipped = _clamp_or_nan(r, lo, hi)
        below = valid & (clipped > r)  # False wherever clipped is NaN (r not finite)
        above = valid & (clipped < r)
        active = valid & (clipped == r)
        tl.store(active_ptr + row64 * active_stride + cols, active.to(tl.uint8), mask=inside)
        acc_clipped += tl.where(valid, clipped, 0.0)
        acc_raw += tl.where(valid, r, 0.0)
        acc_count += valid.to(tl.float32)
        acc_below += below.to(tl.float32)
        acc_above += above.to(tl.float32)
        acc_nonfinite += (valid & (clipped != clipped)).to(tl.float32)
        acc_nan += (valid & (r != r)).to(tl.float32)
        acc_min = tl.minimum(acc_min, tl.where(valid & (r == r), r, float("inf")))
        acc_max = tl.maximum(acc_max, tl.where(valid & (r == r), r, float("-inf")))
    tl.store(out_ptr + row, tl.sum(acc_clipped, axis=0))
    tl.store(out_ptr + n_rows + row, tl.sum(acc_raw, axis=0))
    tl.store(out_ptr + 2 * n_rows + row, tl.sum(acc_count, axis=0))
    tl.store(out_ptr + 3 * n_rows + row, tl.sum(acc_below, axis=0))
    tl.store(out_ptr + 4 * n_rows + row, tl.sum(acc_above, axis=0))
    has_nan = tl.sum(acc_nan, axis=0) > 0  # min/max of a row with a NaN is NaN, as torch's amin/amax
    tl.store(out_ptr + 5 * n_rows + row, tl.where(has_nan, float("nan"), tl.min(acc_min, axis=0)))
    tl.store(out_ptr + 6 * n_rows + row, tl.where(has_nan, float("nan"), tl.max(acc_max, axis=0)))
    tl.store(out_ptr + 7 * n_rows + row, tl.sum(acc_nonfinite, axis=0))


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]  # untyped where triton is absent or untyped
def _row_coef_backward(  # type: ignore[no-untyped-def]  # Triton reads annotations (tl.constexpr): args stay bare
    coef_ptr,
    active_ptr,
    grad_ptr,
    length,
    active_stride,
    grad_stride,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < length
    row64 = row.to(tl.int64)
    coef = tl.load(coef_ptr + row).to(tl.float32)
    active = tl.load(active_ptr + row64 * active_stride + cols, mask=inside, other=0) != 0
    grad = tl.where(active, coef, 0.0)
    tl.store(grad_ptr + row64 * grad_stride + cols, grad.to(grad_ptr.dtype.element_ty), mask=inside)


def _as_bytes(mask: torch.Tensor) -> torch.Tensor:
    return mask.view(torch.uint8) if mask.dtype == torch.bool else mask


@torch.library.custom_op("gmpo_plugins::clipped_row_sums_forward", mutates_args=())
def _forward_op(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    batch, length = log_probs.shape
    out = torch.empty((8, batch), dtype=torch.float32, device=log_probs.device)
    active = torch.empty((batch, length), dtype=torch.uint8, device=log_probs.device)
    if batch > 0:
        _row_stats_forward[(batch,)](
            log_probs,
            old_log_probs,
            mask,
            lo,
            hi,
            active,
            out,
            batch,
            length,
            log_probs.stride(0),
            old_log_probs.stride(0),
            mask.stride(0),
            active.stride(0),
            BLOCK=FORWARD_BLOCK,
        )
    return out, active


@_forward_op.register_fake
def _forward_shapes(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    batch, length = log_probs.shape
    out = log_probs.new_empty((8, batch), dtype=torch.float32)
    return out, log_probs.new_empty((batch, length), dtype=torch.uint8)


@torch.library.custom_op("gmpo_plugins::clipped_row_sums_backward", mutates_args=())
def _backward_op(active: torch.Tensor, coef: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    batch, length = active.shape
    grad = torch.empty((batch, length), dtype=dtype, device=active.device)
    if batch > 0 and length > 0:
        grid = (batch, triton.cdiv(length, BACKWARD_BLOCK))
        _row_coef_backward[grid](coef, active, grad, length, active.stride(0), grad.stride(0), BLOCK=BACKWARD_BLOCK)
    return grad


@_backward_op.register_fake
def _backward_shapes(active: torch.Tensor, coef: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return active.new_empty(active.shape, dtype=dtype)


def forward(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(stats (8, B) float32, active (B, T) bool); inputs need a unit stride along T."""
    log_probs, old_log_probs, mask = (
        t if t.stride(-1) == 1 else t.contiguous() for t in (log_probs, old_log_probs, mask)
    )
    out, active = _forward_op(
        log_probs, old_log_probs, _as_bytes(mask), lo.to(torch.float32).contiguous(), hi.to(torch.float32).contiguous()
    )
    return out, active.view(torch.bool)


def backward(active: torch.Tensor, coef: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """grad (B, T) in ``dtype``: coef_i where active, 0 elsewhere."""
    grad: torch.Tensor = _backward_op(active.view(torch.uint8), coef.to(torch.float32).contiguous(), dtype)
    return grad
