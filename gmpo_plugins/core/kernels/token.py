"""Fused token-level PPO-clip losses (GRPO, DAPO, Dr.GRPO) in blocked torch.

Per valid token t of row i (``losses/ppo_clip.py``, whose eager version stays the oracle):

    r_t  = clamp(log_probs_t - old_log_probs_t, -R, R),  rho_t = exp(r_t)
    u_t  = -A_t * rho_t,  c_t = -A_t * clamp(rho_t, 1 - eps_low, 1 + eps_high)
    pg_t = max(u_t, c_t), then min(pg_t, -A_t * dual_clip) where A_t < 0 (if dual_clip)
    S_i  = sum_t m_t * pg_t * w_t                          (w_t: rollout IS weight, or 1)

The forward pass returns S (B,) and per-row statistics; the (B,)-sized reduction
(token-mean, seq-mean-token-mean, seq-mean-token-sum-norm) is ordinary torch code, so
autograd hands g_i = dLoss/dS_i to the backward pass, which re-reads the inputs (nothing
of size (B, T) is saved beyond references to the inputs themselves) and writes

    grad_t = g_i * m_t * w_t * [not dual-capped] * (-A_t) * rho_t * [|r_t| <= R]
             * (a_t + b_t * [1 - eps_low <= rho_t <= 1 + eps_high])

with (a_t, b_t) = (1, 0) where u_t > c_t, (0, 1) where u_t < c_t and (1/2, 1/2) on a tie:
the gradient autograd gives for ``torch.maximum`` and ``clamp`` in the eager loss.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from gmpo_plugins.core.kernels.rowsum_torch import rows_per_block
from gmpo_plugins.core.kernels.stats import compute_dtype
from gmpo_plugins.core.reduce import as_bool_mask
from gmpo_plugins.core.tail import RowStats, finish, kl_rows
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction

TOKEN_BLOCKS = 64  # more, smaller blocks than clipped_row_sums: about ten temporaries live


class _Clip:
    """Hyper-parameters of the clipped surrogate."""

    def __init__(self, eps_low: float, eps_high: float, dual_clip: float | None, bound: float) -> None:
        self.low, self.high, self.dual, self.bound = 1.0 - eps_low, 1.0 + eps_high, dual_clip, bound


class _Block:
    """One block of rows in the compute dtype, with float 0/1 masks only (torch's CPU
    kernels with boolean operands are several times slower than the float ones).

    valid (0/1), r (log ratio, 0 on padding even for NaN/inf padding), ratio = exp(clamp(r)),
    neg_a = -A, and the surrogate before the dual cap

        pg = max(u, c) = -A * clamp(ratio, lower, upper),  u = -A ratio, c = -A clamp(ratio, 1 - eps_low, 1 + eps_high)

    with lower = 1 - eps_low where A < 0 (else -inf) and upper = 1 + eps_high where A > 0
    (else +inf): -A * x is monotone in x and so is its rounding, so both forms give the
    same float. cap = -A * dual_clip where A < 0 (else +inf) when dual_clip is set.
    """

    def __init__(
        self,
        log_probs: torch.Tensor,
        old: torch.Tensor,
        mask: torch.Tensor,
        advantages: torch.Tensor,
        weights: torch.Tensor | None,
        clip: _Clip,
        dtype: torch.dtype,
    ) -> None:
        valid_bool = mask if mask.dtype == torch.bool else mask != 0
        self.valid = valid_bool.view(torch.uint8).to(dtype)
        r = torch.sub(log_probs.to(dtype), old.to(dtype)).mul_(self.valid)
        self.r = r.nan_to_num_(nan=0.0, posinf=math.inf, neginf=-math.inf)
        self.clamped = r.clamp(-clip.bound, clip.bound)
        self.ratio = self.clamped.exp()
        a = advantages.to(dtype)
        self.a = a[:, None] if a.dim() == 1 else a
        self.neg_a = -self.a
        self.cap = None if clip.dual is None else torch.where(self.a < 0, self.neg_a * clip.dual, math.inf)
        w = None if weights is None else weights.to(dtype)
        self.w = w[:, None] if w is not None and w.dim() == 1 else w

    def surrogate(self, clip: _Clip) -> torch.Tensor:
        """pg = max(u, c) before the dual cap (a new tensor)."""
        lower = torch.full_like(self.a, -math.inf).masked_fill_(self.a < 0, clip.low)
        upper = torch.full_like(self.a, math.inf).masked_fill_(self.a > 0, clip.high)
        pg = torch.maximum(self.ratio, lower)
        return torch.minimum(pg, upper, out=pg).mul_(self.neg_a)

    def branches(self, clip: _Clip) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(u, c, clamp(ratio, 1 - eps_low, 1 + eps_high)) for the backward pass's tie rule."""
        banded = self.ratio.clamp(clip.low, clip.high)
        return self.ratio * self.neg_a, banded * self.neg_a, banded


class _TokenRowSums(torch.autograd.Function):
    """(log_probs, old, mask, advantages, weights, clip) -> S (B,), stats (8, B): S, sum of
    r, valid tokens, low-clipped, high-clipped, min r, max r, dual-capped (per row)."""

    @staticmethod
    def forward(  # ctx: torch's per-call context, which carries the attributes set on it (Any)
        ctx: Any,
        log_probs: torch.Tensor,
        old: torch.Tensor,
        mask: torch.Tensor,
        advantages: torch.Tensor,
        weights: torch.Tensor | None,
        clip: _Clip,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length = log_probs.shape
        dtype = compute_dtype(log_probs.dtype)
        out = torch.zeros((8, batch), dtype=dtype, device=log_probs.device)
        step = rows_per_block(batch, length, log_probs.device, TOKEN_BLOCKS)
        big = torch.finfo(dtype).max
        for start in range(0, batch, step):
            rows = slice(start, min(batch, start + step))
            k = _Block(
                log_probs[rows],
                old[rows],
                mask[rows],
                advantages[rows],
                None if weights is None else weights[rows],
                clip,
                dtype,
            )
            o = out[:, rows]
            pg = k.surrogate(clip)
            if k.cap is not None:
                torch.sum(torch.gt(pg, k.cap).to(dtype).mul_(k.valid), dim=-1, out=o[7])
                torch.minimum(pg, k.cap, out=pg)  # the value of where(A < 0 & pg > cap, cap, pg)
            if k.w is not None:
                pg.mul_(k.w)
            pg.mul_(k.valid).nan_to_num_(nan=0.0, posinf=math.inf, neginf=-math.inf)
            torch.sum(pg, dim=-1, out=o[0])
            torch.sum(k.r, dim=-1, out=o[1])
            torch.sum(k.valid, dim=-1, out=o[2])
            # clipped: A < 0 and ratio < 1 - eps_low / A > 0 and ratio > 1 + eps_high, valid
            low = torch.lt(k.ratio, clip.low, out=pg).mul_(k.valid).mul_((k.a < 0).to(dtype))
            torch.sum(low, dim=-1, out=o[3])
            high = torch.gt(k.ratio, clip.high, out=pg).mul_(k.valid).mul_((k.a > 0).to(dtype))
            torch.sum(high, dim=-1, out=o[4])
            invalid = torch.rsub(k.valid, 1.0)
            torch.amin(torch.add(k.r, invalid, alpha=big, out=pg), dim=-1, out=o[5])
            torch.amax(torch.add(k.r, invalid, alpha=-big, out=pg), dim=-1, out=o[6])
        empty = out[2] == 0
        out[5].masked_fill_(empty, math.inf)
        out[6].masked_fill_(empty, -math.inf)
        ctx.save_for_backward(log_probs, old, mask, advantages, weights)
        ctx.clip = clip
        ctx.mark_non_differentiable(out)
        return out[0].clone(), out

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, grad_sum: torch.Tensor, _: torch.Tensor
    ) -> tuple[torch.Tensor, None, None, None, None, None]:
        log_probs, old, mask, advantages, weights = ctx.saved_tensors
        clip = ctx.clip
        batch, length = log_probs.shape
        dtype = grad_sum.dtype
        grad = torch.empty_like(log_probs)
        step = rows_per_block(batch, length, log_probs.device, TOKEN_BLOCKS)
        for start in range(0, batch, step):
            rows = slice(start, min(batch, start + step))
            k = _Block(
                log_probs[rows],
                old[rows],
                mask[rows],
                advantages[rows],
                None if weights is None else weights[rows],
                clip,
                dtype,
            )
            u, c, banded = k.branches(clip)
            # share of d pg / d (-A ratio): 1 where u > c, band where u < c, (1 + band) / 2 on a tie
            tie = torch.eq(u, c).to(dtype)
            first = torch.gt(u, c).to(dtype).add_(tie, alpha=0.5)
            band = torch.eq(banded, k.ratio, out=banded)
            share = band.add_(first.mul_(band.neg().add_(1.0)))  # first + (1 - first) * band
            d = share.mul_(k.neg_a).mul_(k.ratio)
            d.mul_(torch.eq(k.clamped, k.r, out=k.clamped)).mul_(k.valid)  # overflow guard, padding
            if k.cap is not None:
                d.mul_(torch.le(k.surrogate(clip), k.cap).to(dtype))
            if k.w is not None:
                d.mul_(k.w)
            d.mul_(grad_sum[rows, None])
            grad[rows] = d.masked_fill_(~(mask[rows] if mask.dtype == torch.bool else mask[rows] != 0), 0.0)
        return grad, None, None, None, None, None


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
    row_sums, stats = _TokenRowSums.apply(  # type: ignore[no-untyped-call]  # torch's Function.apply is unannotated
        inputs.log_probs, inputs.old_log_probs.detach(), inputs.mask.detach(), inputs.advantages.detach(), weights, clip
    )
    row_stats = RowStats(
        count=stats[2],
        rows=(stats[2] > 0).to(dtype),
        sum_raw=stats[1],
        raw_min=stats[5],
        raw_max=stats[6],
        clipped_low=stats[3],
        clipped_high=stats[4],
    )
    extra = {}
    if dual_clip is not None:
        extra["clip_frac_dual"] = (stats[7].sum() / stats[2].sum().clamp_min(1)).detach()
    mask = as_bool_mask(inputs.mask)
    kl = kl_rows(
        inputs, mask, dtype, kl_beta=kl_beta, kl_estimator=kl_estimator, kl_clamp=kl_clamp, loss_name=loss_name
    )
    return finish(
        row_sums,
        row_stats,
        batch,
        reduction=reduction,
        norm_length=norm_length,
        kl=kl,
        kl_beta=kl_beta,
        extra=extra,
    )
