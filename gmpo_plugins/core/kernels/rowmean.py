"""Masked row means of a (B, T) tensor, block of rows by block (no (B, T) float temporary).

    mean_i = sum_t m_t * v_t / max(1, sum_t m_t)

The fused paths' ``prepared.row_mean`` (same formula, same signature), for row-constant
(B, T) advantages and token-level rollout IS weights, which the sequence-level losses need
per sequence (``prepared.sequence_is_weights(..., mean=row_masked_mean)``).
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.kernels.rowsum_torch import rows_per_block
from gmpo_plugins.core.reduce import as_bool_mask, masked_mean


def row_masked_mean(values: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype, *, log: bool = False) -> torch.Tensor:
    """values (B, T) float, mask (B, T) bool or 0/1 -> (B,) in ``dtype``; the mean of
    ``log(values)`` with ``log=True``."""
    batch, length = values.shape
    out = torch.empty(batch, dtype=dtype, device=values.device)
    step = rows_per_block(batch, length, values.device)
    for start in range(0, batch, step):
        rows = slice(start, min(batch, start + step))
        block = values[rows].detach().to(dtype)
        out[rows] = masked_mean(block.log() if log else block, as_bool_mask(mask[rows]), dim=-1)
    return out
