"""The one-sided log-space clip of the GMPO family, shared by the eager losses and the
fused kernels' epilogue."""

from __future__ import annotations

import torch


def one_sided_clip(
    values: torch.Tensor,
    positive: torch.Tensor,
    negative: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's trust region in log space, by the sign of the advantage.

        out = min(values, eps_high)   where positive
              max(values, -eps_low)   where negative
              values                  elsewhere (A = 0, padding: neither side)

    All tensors share one shape ((B,) or (B, T)); returns (out, chosen-low mask,
    chosen-high mask). A value replaced by its bound gets zero gradient.
    """
    above = positive & (values > eps_high)
    below = negative & (values < -eps_low)
    clipped = torch.where(above, eps_high, torch.where(below, -eps_low, values))
    return clipped, below, above


def required_eps(clip: str, eps_low: float | None, eps_high: float | None) -> tuple[float, float]:
    """``(eps_low, eps_high)`` for a clipping variant (``clip`` is ``"token"`` or ``"sequence"``);
    ValueError naming the missing bound when either is None (only ``clip="none"`` runs without)."""
    for name, value in (("eps_low", eps_low), ("eps_high", eps_high)):
        if value is None:
            raise ValueError(f"clip={clip!r} needs {name}: expected a float > 0 (a log-space bound), got None")
    assert eps_low is not None and eps_high is not None  # narrowed by the loop above
    return eps_low, eps_high
