"""``clipped_row_sums``: one pass over (B, T) producing ``RowSums``, differentiable in
``sum_clipped`` with a backward pass that needs only (B,) coefficients and a 1-byte mask.

    sum_clipped_i = sum_t m_t * clamp(r_t, lo_i, hi_i),   r_t = log_probs_t - old_log_probs_t
    d sum_clipped_i / d log_probs_t = active_t = m_t & (lo_i <= r_t <= hi_i)

so with g_i = dLoss/dsum_clipped_i (B,), computed by autograd from whatever (B,)-sized
formula the loss builds on top, ``grad_log_probs_t = g_i * active_t``. The bounds are
inclusive as ``torch.clamp``'s gradient is; a token outside them (clipped, or beyond the
overflow guard) gets exactly zero gradient. Nothing of size (B, T) in float is saved.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from gmpo_plugins.core.kernels.dispatch import select_backend
from gmpo_plugins.core.kernels.stats import RowSums
from gmpo_plugins.core.types import Impl


class _ClippedRowSums(torch.autograd.Function):
    """(backend, log_probs, old_log_probs, mask, lo, hi) -> the 8 fields of RowSums."""

    @staticmethod
    def forward(  # ctx: torch's per-call context, which carries the attributes set on it (Any)
        ctx: Any,
        backend: ModuleType,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        mask: torch.Tensor,
        lo: torch.Tensor,
        hi: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        out, active = backend.forward(log_probs, old_log_probs, mask, lo, hi)
        ctx.save_for_backward(active)
        ctx.backend = backend
        ctx.grad_dtype = log_probs.dtype
        outputs = tuple(out.unbind(0))
        ctx.mark_non_differentiable(*outputs[1:])
        return outputs

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, grad_sum: torch.Tensor, *_: torch.Tensor
    ) -> tuple[None, torch.Tensor, None, None, None, None]:
        (active,) = ctx.saved_tensors
        return None, ctx.backend.backward(active, grad_sum, ctx.grad_dtype), None, None, None, None


def clipped_row_sums(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    mask: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    *,
    impl: Impl = "auto",
) -> RowSums:
    """Per-row statistics of r = log_probs - old_log_probs over ``mask``.

    log_probs, old_log_probs (B, T) float; mask (B, T) bool or 0/1; lo, hi (B,) with
    lo <= hi. Computed in float32 for half inputs; the gradient has log_probs' dtype.
    ``impl``: "auto", "torch" or "triton" (see ``dispatch``).
    """
    backend = select_backend(impl, log_probs)
    outputs = _ClippedRowSums.apply(  # type: ignore[no-untyped-call]  # torch's Function.apply is unannotated
        backend, log_probs, old_log_probs.detach(), mask.detach(), lo.detach(), hi.detach()
    )
    return RowSums(*outputs)
