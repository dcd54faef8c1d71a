"""Torch backend of ``clipped_row_sums``: the forward pass block of rows by block.

Forward, for each row i (B rows, T positions), with r_t = log_probs_t - old_log_probs_t
computed in the compute dtype (float32 for half inputs) and per-row bounds lo_i <= hi_i:

    sum_clipped_i = sum_t m_t * clamp_or_nan(r_t, lo_i, hi_i)  (differentiable)
    sum_raw_i     = sum_t m_t * r_t
    count_i       = sum_t m_t
    below_i       = sum_t m_t * [r_t < lo_i]
    above_i       = sum_t m_t * [r_t > hi_i]
    raw_min_i     = min_{t: m_t} r_t     (+inf for an empty row)
    raw_max_i     = max_{t: m_t} r_t     (-inf for an empty row)
    nonfinite_i   = sum_t m_t * [r_t is NaN or +-inf]
    active_t      = m_t & lo_i <= r_t <= hi_i                 (bool, saved for backward)

``clamp_or_nan`` is the guard of every path (``prepared``): a valid token whose r_t is NaN
or +-inf makes sum_clipped_i NaN (and so the loss), counts in nonfinite_i and in neither
below_i nor above_i; sum_raw_i, raw_min_i and raw_max_i carry it as it is (NaN, or the
infinity). A valid +-inf token is not active; a valid NaN one is (its row's coefficient
is NaN anyway). Padding (m_t = 0) contributes 0 whatever it holds.

Backward, given g_i = dLoss/dsum_clipped_i (B,):

    grad_log_probs_t = g_i * active_t                          (in the input dtype)

Blocks of about ``BLOCK_ELEMENTS`` elements keep every float temporary small and in
cache, so the extra memory of a call is the 1-byte ``active`` mask, O(B) outputs and
one bounded workspace, and nothing of size (B, T) in float is saved for backward.
"""

from __future__ import annotations

import math

import torch

from gmpo_plugins.core.kernels.stats import compute_dtype
from gmpo_plugins.core.prepared import clamp_or_nan
from gmpo_plugins.core.reduce import as_bool_mask

BLOCK_ELEMENTS = 1 << 17  # CPU: at most this many elements per block (temporaries stay in cache)
MIN_BLOCK_ELEMENTS = 1 << 14  # CPU: at least this many (per-op overhead)
BLOCKS = 16  # CPU: aim for this many blocks, so the workspace stays ~1/16 of the input
BLOCK_ELEMENTS_ACCELERATOR = 1 << 22  # elsewhere: fewer, larger launches


def rows_per_block(batch: int, length: int, device: torch.device, blocks: int = BLOCKS) -> int:
    """Rows processed together. On CPU an input of at most BLOCK_ELEMENTS elements is one
    block (its temporaries fit in cache, and a small call pays each op's fixed cost once);
    a larger one is cut into blocks of about tokens / BLOCKS elements, clamped to
    [MIN_BLOCK_ELEMENTS, BLOCK_ELEMENTS]: each torch op costs a few
    microseconds of overhead, so blocks must not be tiny, and the workspace (about five
    float temporaries of one block) must stay well below the gradient so that the
    peak of a forward+backward is the backward's (gradient + 1-byte mask)."""
    if device.type == "cpu":
        total = batch * length
        elements = total if total <= BLOCK_ELEMENTS else min(BLOCK_ELEMENTS, max(MIN_BLOCK_ELEMENTS, total // blocks))
    else:
        elements = BLOCK_ELEMENTS_ACCELERATOR
    return max(1, elements // max(1, length))


def _forward_block(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    mask: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    active: torch.Tensor,
    out: torch.Tensor,
    nan: torch.Tensor,
    work: torch.Tensor,
) -> None:
    """Fill ``active`` (rows, T), the 8 statistics ``out`` (8, rows) and ``nan`` (rows,), the
    valid tokens whose r is NaN, of one block, with ``work`` (4, rows, T) as scratch space
    (reused across blocks: no allocation, no first-touch page faults per block).

    Only float arithmetic on (rows, T) (comparisons write float 0/1), because torch's CPU
    kernels with boolean operands are several times slower than the float ones:

        m    = mask as 0/1 float
        nan  = sum [r != r] * m                             counted before the next line
        r    = nan_to_num(m * (log_probs - old_log_probs))  0 on padding, even NaN/inf padding,
                                                            and at a valid NaN (``forward``
                                                            makes its row NaN); a valid
                                                            +-inf stays
        c    = clamp_or_nan(r, lo, hi)                      NaN at a valid +-inf; padding
                                                            stays 0 (lo <= 0 <= hi)
        below, above = sum [c > r], sum [c < r]             (False wherever c is NaN)
        active = m * [c == r]
        nonfinite = sum [c != c]                            (the +-inf; ``forward`` adds nan)
        raw_min, raw_max = min, max of r +- BIG * (1 - m)   (BIG = finfo.max; +-inf if empty)
    """
    dtype = out.dtype
    valid, r, c, side = work
    valid.copy_(as_bool_mask(mask).view(torch.uint8))
    if log_probs.dtype == dtype and old_log_probs.dtype == dtype:
        torch.sub(log_probs, old_log_probs, out=r)
    else:
        r.copy_(log_probs).sub_(old_log_probs.to(dtype))
    torch.sum(torch.ne(r, r, out=side).mul_(valid), dim=-1, out=nan)
    r.mul_(valid).nan_to_num_(nan=0.0, posinf=math.inf, neginf=-math.inf)
    clamp_or_nan(r, lo[:, None], hi[:, None], out=c)
    torch.sum(c, dim=-1, out=out[0])
    torch.sum(r, dim=-1, out=out[1])
    torch.sum(valid, dim=-1, out=out[2])
    torch.sum(torch.gt(c, r, out=side), dim=-1, out=out[3])
    torch.sum(torch.lt(c, r, out=side), dim=-1, out=out[4])
    torch.sum(torch.ne(c, c, out=side), dim=-1, out=out[7])
    active.copy_(torch.eq(c, r, out=side).mul_(valid))
    invalid = valid.neg_().add_(1.0)
    big = torch.finfo(dtype).max
    torch.amin(torch.add(r, invalid, alpha=big, out=side), dim=-1, out=out[5])
    torch.amax(torch.add(r, invalid, alpha=-big, out=side), dim=-1, out=out[6])


def forward(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(stats (8, B) in the compute dtype, active (B, T) bool), block of rows by block; a row
    with a valid NaN r gets NaN sum_clipped, sum_raw, raw_min and raw_max (as a where over
    the tokens would give) and counts it in nonfinite."""
    batch, length = log_probs.shape
    dtype = compute_dtype(log_probs.dtype)
    out = torch.empty((8, batch), dtype=dtype, device=log_probs.device)
    nan = torch.empty(batch, dtype=dtype, device=log_probs.device)
    active = torch.empty((batch, length), dtype=torch.bool, device=log_probs.device)
    lo, hi = lo.to(dtype), hi.to(dtype)
    step = rows_per_block(batch, length, log_probs.device)
    work = torch.empty((4, min(step, batch), length), dtype=dtype, device=log_probs.device)
    for start in range(0, batch, step):
        rows = slice(start, min(batch, start + step))
        n = rows.stop - start
        _forward_block(
            log_probs[rows],
            old_log_probs[rows],
            mask[rows],
            lo[rows],
            hi[rows],
            active[rows],
            out[:, rows],
            nan[rows],
            work[:, :n],
        )
    empty = out[2] == 0
    out[5].masked_fill_(empty, math.inf)
    out[6].masked_fill_(empty, -math.inf)
    out[7].add_(nan)
    poisoned = out[(0, 1, 5, 6),]  # a copy: (4, B)
    out[(0, 1, 5, 6),] = poisoned.masked_fill_(nan > 0, math.nan)
    return out, active


_SAME_WIDTH_INT = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
}


def backward(active: torch.Tensor, coef: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """grad (B, T) in ``dtype``: coef_i (rounded to ``dtype``) where active, +0 elsewhere.

    Written on the bits, ``bits(grad) = active * bits(coef_i)`` (an integer product with
    0 or 1), in place on the gradient: no temporary, and exactly 0 on inactive tokens even
    where coef_i is inf or NaN (a float product would give NaN there; autograd through
    where/clamp gives 0).
    """
    grad = torch.empty(active.shape, dtype=dtype, device=active.device)
    as_int = _SAME_WIDTH_INT[dtype]
    grad.view(as_int).copy_(active.view(torch.uint8)).mul_(coef.to(dtype).view(as_int)[:, None])
    return grad
