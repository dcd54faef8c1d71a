"""Builders of random micro-batches shared by the core tests."""

from __future__ import annotations

import torch

from gmpo_plugins import LossInputs


def random_batch(
    batch_size: int = 6,
    length: int = 9,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    spread: float = 0.5,
    empty_rows: tuple[int, ...] = (),
    token_advantages: bool = False,
) -> LossInputs:
    """Mixed lengths (row i has 1 + (i * 5) % length valid tokens, left-aligned), advantages
    of both signs and a zero, log ratios ~ N(0, spread)."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch_size, length, generator=g, dtype=dtype) * 3
    log_probs = (old + spread * torch.randn(batch_size, length, generator=g, dtype=dtype)).requires_grad_()
    lengths = [0 if i in empty_rows else 1 + (i * 5) % length for i in range(batch_size)]
    mask = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    advantages = torch.randn(batch_size, generator=g, dtype=dtype)
    if batch_size > 2:
        advantages[2] = 0.0
    if token_advantages:
        advantages = advantages[:, None].expand(batch_size, length).clone()
    return LossInputs(log_probs=log_probs, old_log_probs=old, advantages=advantages, mask=mask)
