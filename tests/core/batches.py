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


def complete(inputs: LossInputs, name: str) -> LossInputs:
    """``inputs`` with the optional inputs loss ``name`` requires (``LossSpec.requires``) filled in,
    so that tests over every loss can call it: (B,) rewards of both signs (a zero included),
    rollout log-probs 0.1 * sin(t) away from ``old_log_probs``, and group ids pairing
    consecutive rows (0, 0, 1, 1, ...). Fields already given are kept,
    except precomputed ``rollout_is_weights`` where the loss's own correction defaults compute
    IS weights (``LossSpec.correction``: the two would be refused as two IS weights)."""
    from dataclasses import replace

    from gmpo_plugins import get_loss

    spec = get_loss(name)
    fill: dict[str, torch.Tensor | None] = {}
    if spec.correction.get("rollout_is") is not None and inputs.rollout_is_weights is not None:
        fill["rollout_is_weights"] = None
    old = inputs.old_log_probs
    for field in spec.requires:
        if getattr(inputs, field) is not None:
            continue
        if field == "rewards":
            rows = torch.arange(old.shape[0], dtype=old.dtype, device=old.device)
            fill[field] = torch.cos(rows * 2.0).round()
        elif field == "rollout_log_probs":
            steps = torch.arange(old.shape[-1], dtype=old.dtype, device=old.device)
            fill[field] = (old.detach() + 0.1 * torch.sin(steps)).to(old.dtype)
        elif field == "group_ids":
            fill[field] = torch.arange(old.shape[0], device=old.device) // 2
    return replace(inputs, **fill) if fill else inputs
