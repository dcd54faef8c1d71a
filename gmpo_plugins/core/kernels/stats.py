"""The per-row statistics one fused pass over (B, T) produces, shared by every backend."""

from __future__ import annotations

from typing import NamedTuple

import torch

from gmpo_plugins.core.prepared import compute_dtype

__all__ = ["RowSums", "compute_dtype"]


class RowSums(NamedTuple):
    """Per-row results of ``clipped_row_sums``, all (B,) in the compute dtype.

    sum_clipped  sum_t m_t * clamp(r_t, lo_i, hi_i); the only differentiable field
                 (d/dlog_probs_t = active_t)
    sum_raw      sum_t m_t * r_t
    count        sum_t m_t (valid tokens |o_i|)
    below        valid tokens with r_t < lo_i
    above        valid tokens with r_t > hi_i
    raw_min      min of r_t over valid tokens, +inf for an empty row
    raw_max      max of r_t over valid tokens, -inf for an empty row
    nonfinite    valid tokens whose r_t is NaN or +-inf (sum_clipped is then NaN)
    """

    sum_clipped: torch.Tensor
    sum_raw: torch.Tensor
    count: torch.Tensor  # type: ignore[assignment]  # a public field: hides tuple.count on purpose
    below: torch.Tensor
    above: torch.Tensor
    raw_min: torch.Tensor
    raw_max: torch.Tensor
    nonfinite: torch.Tensor
