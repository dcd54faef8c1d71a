"""Fused token-level PPO-clip losses (GRPO, DAPO, Dr.GRPO) in blocked torch.

Per valid token t of row i (``losses/ppo_clip.py``, whose eager version stays the oracle):

    r_t  = clamp_or_nan(log_probs_t - old_log_probs_t, -R, R),  rho_t = exp(r_t)
    u_t  = -A_t * rho_t,  c_t = -A_t * clamp(rho_t, 1 - eps_low, 1 + eps_high)
    pg_t = max(u_t, c_t), then min(pg_t, -A_t * dual_clip) where A_t < 0 (if dual_clip)
    S_i  = sum_t m_t * pg_t * w_t                          (w_t: rollout IS weight, or 1)

The forward pass returns S (B,) and per-row statistics; the (B,)-sized reduction
(token-mean, seq-mean-token-mean, seq-mean-token-sum-norm) is ordinary torch code, so
autograd hands g_i = dLoss/dS_i to the backward pass. The forward pass also writes the
per-token derivative (B, T), in the compute dtype, from the temporaries it already holds

    d_t = w_t * [not dual-capped] * [|r_t| <= R] * (-A_t) * rho_t
          * (a_t + b_t * [1 - eps_low <= rho_t <= 1 + eps_high])

with (a_t, b_t) = (1, 0) where u_t > c_t, (0, 1) where u_t < c_t and (1/2, 1/2) on a tie:
the gradient autograd gives for ``torch.maximum`` and ``clamp`` in the eager loss. It
saves d (4 bytes per token in float32, the one (B, T) tensor it keeps) and the backward
pass writes grad_t = g_i * d_t where m_t, exactly +0 elsewhere (even for NaN/inf padding
or an infinite g_i), in the input dtype.

Non-finite inputs (``prepared``'s rule): the guard is ``prepared.clamp_or_nan``, so a valid
token whose log ratio is NaN or +-inf has a NaN term, as one with a NaN or infinite
advantage or IS weight has a non-finite one, and S_i is then non-finite. Such a token counts
as clipped on neither side. Padding contributes 0 whatever it holds: the pass multiplies by
the 0/1 mask and drops the NaN that padding's inf or NaN makes, after counting the valid
NaN, whose rows it makes NaN (float arithmetic only: a CPU kernel with a boolean operand
costs many float ones). A valid token whose log ratio is NaN gets zero derivative, as on
the eager path; the non-finite rule's gradient (``prepared``) is the backward's: -0 added to
the first entry of the gradient, or NaN when the pass counted a valid position where one of
its inputs is NaN or +-inf (one element: nothing of size (B, T)).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from gmpo_plugins.core.kernels.rowsum_torch import _SAME_WIDTH_INT, rows_per_block
from gmpo_plugins.core.kernels.stats import compute_dtype
from gmpo_plugins.core.prepared import clamp_or_nan
from gmpo_plugins.core.reduce import as_bool_mask
from gmpo_plugins.core.tail import RowStats, finish, kl_rows
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


class _Clip:
    """Hyper-parameters of the clipped surrogate."""

    def __init__(self, eps_low: float, eps_high: float, dual_clip: float | None, bound: float) -> None:
        self.low, self.high, self.dual, self.bound = 1.0 - eps_low, 1.0 + eps_high, dual_clip, bound
        # padding has r = 0, rho = 1: outside the band only for a negative eps (not a valid setting)
        self.padding_in_band = self.low <= 1.0 <= self.high


def _rows_per_block(batch: int, length: int, device: torch.device) -> int:
    """Rows per block: on CPU the whole input up to ``rowsum_torch.BLOCK_ELEMENTS`` elements
    (each torch op has a fixed cost of a few microseconds, which a small input pays once per
    op rather than once per op and block), blocks of that size above, so that the seven
    float temporaries of a block stay in cache."""
    return rows_per_block(batch, length, device, blocks=1)


class _Block:
    """One block of rows: its inputs, in the compute dtype where that costs no (rows, T) copy,
    and views of its slices of the outputs and of the workspace."""

    def __init__(
        self,
        rows: slice,
        inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None],
        dtype: torch.dtype,
        out: torch.Tensor,
        deriv: torch.Tensor | None,
        work: torch.Tensor,
    ) -> None:
        log_probs, old, mask, advantages, weights = inputs
        self.log_probs, self.old, self.mask = log_probs[rows], _exact_in(old[rows], dtype), mask[rows]
        a = advantages[rows].to(dtype)
        self.a = a[:, None] if a.dim() == 1 else a
        w = None if weights is None else _exact_in(weights[rows], dtype)
        self.w = w[:, None] if w is not None and w.dim() == 1 else w
        self.out, self.deriv = out[:, rows], None if deriv is None else deriv[rows]
        self.work = work[:, : rows.stop - rows.start]


def _exact_in(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` as an operand of an op computing in ``dtype``: as it is when torch's type
    promotion converts it exactly on the fly (a narrower or equal float), else converted."""
    return t if t.dtype.itemsize <= dtype.itemsize and t.dtype.is_floating_point else t.to(dtype)


def _forward_block(k: _Block, clip: _Clip) -> None:
    """Statistics ``k.out`` (10, rows) and derivative ``k.deriv`` (rows, T) of one block, in
    about thirty elementwise ops and reductions on seven float temporaries (``k.work``,
    reused from block to block), comparisons writing float 0/1 (torch's CPU kernels with
    boolean operands are several times slower than the float ones):

        m     = mask as 0/1
        nan_r = [r != r] * m                          r = log_probs - old; counted, then
        r     = nan_to_num(m * r)                     0 on padding, even NaN/inf padding, and
                                                      at a valid NaN (the caller makes its
                                                      row NaN); a valid +-inf stays
        gate  = [clamp_or_nan(r, -R, R) == r] - nan_r,  rho = exp(clamp_or_nan(r, -R, R))
        out   = [rho != clamp(rho, 1 - eps_low, 1 + eps_high)] * [rho == rho]   (NaN: neither side)
        u, c  = -A rho, -A clamp(rho, 1 - eps_low, 1 + eps_high),  pg = max(u, c)
        d     = u + u * (sign(u - c) - out) / 2                      (then * gate, cap, w)

    sign(u - c) - out is 0 in the band (u = c there: the same product), and outside it 0
    where u > c, -1 on a tie and -2 where u < c: d = u, u / 2 and 0, which is the tie rule
    of the module docstring, equal to its product form wherever u is finite (an infinite
    advantage gives NaN instead of an infinite gradient). pg = max(u, c) is the same float
    as -A * clamp(rho, lower, upper) with one-sided bounds (-A x is monotone in x and so
    is its rounding). Padding tokens of d are left as computed: the backward pass zeroes
    them. Low/high-clipped counts sum [rho < 1 - eps_low], [rho > 1 + eps_high] (padding
    has rho = 1, inside the band) times [A < 0], [A > 0]; for row-constant advantages the
    block writes the row sums of [rho < 1 - eps_low] and of out, and the caller keeps the
    first where A < 0 and their difference where A > 0 (exact: integer sums). Min/max of r
    over valid tokens use r +- BIG * (1 - m) (BIG = finfo.max; +-inf for an empty row, set
    by the caller). Non-finite counts per row: o[8] the valid tokens where an input the pass
    reads (log-prob, old log-prob, advantage, IS weight) is NaN or +-inf, from
    (r - r) + 0 * A + 0 * w, NaN exactly there (``prepared``'s rule), o[9] the valid NaN r;
    the row sum o[0] drops NaN (padding times inf is NaN too) and the caller makes a row
    with o[8] > 0 NaN.
    """
    o, a, big = k.out, k.a, torch.finfo(k.out.dtype).max
    valid, r, ratio, gate, banded, outside, pg = k.work
    if k.mask.dtype == torch.bool:
        valid.copy_(k.mask.view(torch.uint8))
    else:
        torch.ne(k.mask, 0, out=valid)
    if k.log_probs.dtype == r.dtype and k.old.dtype == r.dtype:
        torch.sub(k.log_probs, k.old, out=r)
    else:
        r.copy_(k.log_probs).sub_(k.old)
    bad = torch.sub(r, r, out=pg).add_(a * 0)  # 0, NaN where an input the pass reads is not finite
    if k.w is not None:
        bad.add_(k.w * 0)
    torch.sum(torch.ne(bad, bad, out=outside).mul_(valid), dim=-1, out=o[8])
    nan_r = torch.ne(r, r, out=banded).mul_(valid)  # valid tokens whose r is NaN: the next line zeroes it
    torch.sum(nan_r, dim=-1, out=o[9])
    r.mul_(valid).nan_to_num_(nan=0.0, posinf=math.inf, neginf=-math.inf)
    clamp_or_nan(r, -clip.bound, clip.bound, out=ratio)
    torch.eq(ratio, r, out=gate).sub_(nan_r)
    ratio.exp_()
    torch.clamp(ratio, clip.low, clip.high, out=banded)
    torch.ne(banded, ratio, out=outside).mul_(torch.eq(ratio, ratio, out=pg))
    if a.shape[-1] == 1 and clip.padding_in_band:  # below and outside; the caller keeps one per row
        torch.sum(torch.lt(ratio, clip.low, out=pg), dim=-1, out=o[3])
        torch.sum(outside, dim=-1, out=o[4])
    else:
        for compare, bound, side, row in ((torch.lt, clip.low, a < 0, 3), (torch.gt, clip.high, a > 0, 4)):
            flags = compare(ratio, bound, out=pg).mul_(valid)
            torch.sum(flags.mul_(side.to(flags.dtype)), dim=-1, out=o[row])
    neg_a = -a
    u, c = ratio.mul_(neg_a), banded.mul_(neg_a)
    torch.maximum(u, c, out=pg)
    if k.deriv is not None:
        share = torch.sub(u, c, out=c).sign_().sub_(outside)
        torch.addcmul(u, u, share, value=0.5, out=k.deriv).mul_(gate)
    if clip.dual is not None:
        cap = torch.where(a < 0, neg_a * clip.dual, math.inf)
        if k.deriv is not None:
            k.deriv.mul_(torch.le(pg, cap, out=outside))
        torch.sum(torch.gt(pg, cap, out=outside).mul_(valid), dim=-1, out=o[7])
        torch.minimum(pg, cap, out=pg)  # the value of where(A < 0 & pg > cap, cap, pg)
    if k.w is not None:
        if k.deriv is not None:
            k.deriv.mul_(k.w)
        pg.mul_(k.w)
    torch.nansum(pg.mul_(valid), dim=-1, out=o[0])  # drops padding's NaN (inf or NaN A, w); the caller restores o[8]
    torch.sum(r, dim=-1, out=o[1])
    torch.sum(valid, dim=-1, out=o[2])
    invalid = torch.sub(torch.ones((), dtype=valid.dtype, device=valid.device), valid, out=valid)
    torch.amin(torch.add(r, invalid, alpha=big, out=pg), dim=-1, out=o[5])
    torch.amax(torch.add(r, invalid, alpha=-big, out=pg), dim=-1, out=o[6])


class _TokenRowSums(torch.autograd.Function):
    """(log_probs, old, mask, advantages, weights, clip) -> S (B,), stats (10, B): S, sum of
    r, valid tokens, low-clipped, high-clipped, min r, max r, dual-capped, valid tokens with a
    non-finite input, valid NaN r (``_forward_block``) (per row)."""

    @staticmethod
    def forward(  # ctx: torch's per-call context, which carries the attributes set on it (Any)
        ctx: Any,
        log_probs: torch.Tensor,
        old: torch.Tensor,
        mask: torch.Tensor,
        advantages: torch.Tensor,
        weights: torch.Tensor | None,
        clip: _Clip,
        derivative: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length = log_probs.shape
        dtype = compute_dtype(log_probs.dtype)
        device = log_probs.device
        out = torch.empty((10, batch), dtype=dtype, device=device)
        if clip.dual is None:
            out[7].zero_()
        deriv = torch.empty((batch, length), dtype=dtype, device=device) if derivative else None
        step = _rows_per_block(batch, length, device)
        work = torch.empty((7, min(step, batch), length), dtype=dtype, device=device)
        inputs = (log_probs, old, mask, advantages, weights)
        for start in range(0, batch, step):
            _forward_block(_Block(slice(start, min(batch, start + step)), inputs, dtype, out, deriv, work), clip)
        if (advantages.dim() == 1 or advantages.shape[-1] == 1) and clip.padding_in_band:
            a = advantages.reshape(batch)  # out[3:5] hold (below, outside the band): low if A < 0, high if A > 0
            out[4].sub_(out[3]).mul_(a > 0)
            out[3].mul_(a < 0)
        empty = out[2] == 0
        out[5].masked_fill_(empty, math.inf)
        out[6].masked_fill_(empty, -math.inf)
        nan_r = out[9] > 0  # a valid NaN r, zeroed in the pass: its row's sum, raw sum, min and max are NaN
        out[0].masked_fill_(out[8] > 0, math.nan)
        for row in (1, 5, 6):
            out[row].masked_fill_(nan_r, math.nan)
        poison = torch.where(out[8].sum() > 0, math.nan, -0.0)  # the backward's (module docstring)
        ctx.save_for_backward(deriv, mask, poison)
        ctx.grad_dtype = log_probs.dtype
        ctx.mark_non_differentiable(out)
        ctx.set_materialize_grads(False)  # no zero gradient is made for the statistics
        return out[0].clone(), out

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, grad_sum: torch.Tensor | None, _: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, None, None, None, None, None, None]:
        """grad_t = g_i * d_t (rounded once to the input dtype) where m_t, and exactly +0
        elsewhere: written on the bits, bits(grad) = bits(g_i * d_t) * m_t (an integer
        product with 0 or 1), which no inf or NaN in g_i or d_t can turn into NaN; then the
        pass's non-finite rule on the first entry (module docstring)."""
        if grad_sum is None:  # the row sums were not used (gradients are not materialised)
            return None, None, None, None, None, None, None
        deriv, mask, poison = ctx.saved_tensors
        batch, length = deriv.shape
        grad = torch.empty((batch, length), dtype=ctx.grad_dtype, device=deriv.device)
        bits = grad.view(_SAME_WIDTH_INT[grad.dtype])
        step = _rows_per_block(batch, length, deriv.device)
        valid = torch.empty((min(step, batch), length), dtype=bits.dtype, device=deriv.device)
        for start in range(0, batch, step):
            rows = slice(start, min(batch, start + step))
            torch.mul(deriv[rows], grad_sum[rows, None], out=grad[rows])
            m = as_bool_mask(mask[rows])
            bits[rows].mul_(valid[: rows.stop - start].copy_(m.view(torch.uint8)))  # same-dtype product: faster
        grad.view(-1)[:1].add_(poison.to(grad.dtype))
        return grad, None, None, None, None, None, None


def fused_clipped_ratio_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None,
    reduction: Reduction,
    norm_length: int | None,
    kl_beta: float,
    kl_estimator: str,
    log_ratio_bound: float,
    kl_clamp: float | None = None,
    loss_name: str = "grpo",
) -> LossOutput:
    """``losses/ppo_clip.eager_clipped_ratio_loss``, fused (module docstring); a KL term is added
    with the eager formula."""
    dtype = compute_dtype(inputs.log_probs.dtype)
    weights = None if inputs.rollout_is_weights is None else inputs.rollout_is_weights.detach()
    clip = _Clip(eps_low, eps_high, dual_clip, log_ratio_bound)
    derivative = torch.is_grad_enabled() and inputs.log_probs.requires_grad  # else no (B, T) derivative is kept
    row_sums, stats = _TokenRowSums.apply(  # type: ignore[no-untyped-call]  # torch's Function.apply is unannotated
        inputs.log_probs,
        inputs.old_log_probs.detach(),
        inputs.mask.detach(),
        inputs.advantages.detach(),
        weights,
        clip,
        derivative,
    )
    row_stats = RowStats(
        count=stats[2],
        rows=(stats[2] > 0).to(dtype),
        sum_raw=stats[1],
        raw_min=stats[5],
        raw_max=stats[6],
        clipped_low=stats[3],
        clipped_high=stats[4],
        nonfinite=stats[8],
    )
    extra = {}
    if dual_clip is not None:
        extra["clip_frac_dual"] = (stats[7].sum() / stats[2].sum().clamp_min(1)).detach()
    kl = kl_rows(
        inputs, inputs.mask, dtype, kl_beta=kl_beta, kl_estimator=kl_estimator, kl_clamp=kl_clamp, loss_name=loss_name
    )
    return finish(
        row_sums,
        row_stats,
        batch,
        inputs=inputs,
        covered=("log_probs", "old_log_probs", "advantages", "rollout_is_weights"),  # all the pass reads
        reduction=reduction,
        norm_length=norm_length,
        kl=kl,
        kl_beta=kl_beta,
        extra=extra,
    )
