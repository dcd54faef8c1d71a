"""Masked row means of a (B, T) tensor, block of rows by block (no (B, T) float temporary),
and the per-sequence rollout IS weights built on them.

    mean_i = sum_t m_t * v_t / max(1, sum_t m_t)

Used for row-constant (B, T) advantages and token-level rollout IS weights, which the
sequence-level losses need per sequence. Same formula as ``reduce.masked_mean(dim=-1)``.
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


def sequence_is_weights(
    weights: torch.Tensor | None, mask: torch.Tensor, aggregation: str, dtype: torch.dtype
) -> torch.Tensor | None:
    """rho (B,): the rollout IS weight of each sequence, for the value of a sequence-level loss.

    (B,) weights are used as given; (B, T) ones are aggregated over the valid tokens by
    ``aggregation`` (``prepared.IS_AGGREGATIONS``): the geometric mean exp(mean_t log w_t)
    for ``geometric_mean`` (a zero weight makes it 0), the arithmetic mean otherwise
    (``per_token`` scales each token's gradient separately, ``prepared.per_token_is_gradient``).
    An empty row gets 1 (geometric) or 0 (arithmetic), and 0 from (B,) weights whatever they
    hold there (its loss weight is 0, and 0 * NaN would be NaN).
    """
    if weights is None:
        return None
    if weights.dim() == 1:
        zero = torch.zeros((), dtype=dtype, device=weights.device)
        return torch.where(as_bool_mask(mask).any(-1), weights.detach().to(dtype), zero)
    if aggregation == "geometric_mean":
        return torch.exp(row_masked_mean(weights, mask, dtype, log=True))
    return row_masked_mean(weights, mask, dtype)
