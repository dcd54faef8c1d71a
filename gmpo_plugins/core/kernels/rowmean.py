"""Masked row means of a (B, T) tensor, block of rows by block (no (B, T) float temporary).

    mean_i = sum_t m_t * v_t / max(1, sum_t m_t)

Used for row-constant (B, T) advantages and token-level rollout IS weights, which the
sequence-level losses need per sequence. Same formula as ``reduce.masked_mean(dim=-1)``.
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.kernels.rowsum_torch import rows_per_block
from gmpo_plugins.core.reduce import masked_mean


def row_masked_mean(values: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """values (B, T) float, mask (B, T) bool or 0/1 -> (B,) in ``dtype``."""
    batch, length = values.shape
    out = torch.empty(batch, dtype=dtype, device=values.device)
    step = rows_per_block(batch, length, values.device)
    for start in range(0, batch, step):
        rows = slice(start, min(batch, start + step))
        m = mask[rows] if mask.dtype == torch.bool else mask[rows] != 0
        out[rows] = masked_mean(values[rows].detach().to(dtype), m, dim=-1)
    return out
