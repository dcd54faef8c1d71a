"""Random PolicyLoss inputs in OpenRLHF's layout (test helper).

OpenRLHF passes, per micro-batch: ``log_probs`` (B, A) from ``Actor.forward`` (0 where
``action_mask`` is 0), ``old_log_probs`` (B, A), ``advantages`` (B, A) per token, zero off
the mask, ``action_mask`` (B, A) int64 with the response's ones after the prompt's zeros,
``dp_size`` a Python int and ``batch_num_tokens`` / ``global_batch_size`` 0-d float32
tensors (global counts divided by the accumulation steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# (response start, response length, sequence advantage): both signs, a zero advantage,
# a one-token response and an empty one
ROWS = [(0, 9, 1.0), (2, 4, -0.7), (5, 1, 0.3), (0, 0, 0.5), (1, 7, -1.2), (3, 3, 0.0), (4, 5, 0.8), (0, 6, -0.4)]
WIDTH = 10


@dataclass
class Batch:
    leaf: torch.Tensor  # (B, A) requires grad; log_probs = leaf * mask, as Actor.forward gives
    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    action_mask: torch.Tensor
    rollout_log_probs: torch.Tensor

    @property
    def log_probs(self) -> torch.Tensor:
        return self.leaf * self.action_mask

    def rows(self, index) -> Batch:
        leaf = self.leaf.detach()[index].clone().requires_grad_(True)
        return Batch(
            leaf,
            self.old_log_probs[index],
            self.advantages[index],
            self.action_mask[index],
            self.rollout_log_probs[index],
        )


def openrlhf_batch(seed: int = 0, dtype: torch.dtype = torch.float32, spread: float = 0.4) -> Batch:
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(len(ROWS), WIDTH, dtype=torch.long)
    for i, (start, length, _) in enumerate(ROWS):
        mask[i, start : start + length] = 1
    adv = torch.tensor([a for _, _, a in ROWS], dtype=dtype)[:, None] * mask
    old = (-1.0 - torch.rand(len(ROWS), WIDTH, generator=g, dtype=dtype)) * mask
    new = old + spread * torch.randn(len(ROWS), WIDTH, generator=g, dtype=dtype)
    rollout = old + 0.05 * torch.randn(len(ROWS), WIDTH, generator=g, dtype=dtype)
    return Batch(new.requires_grad_(True), old, adv, mask, rollout * mask)


def counts(batch: Batch, dp_size: int = 1, gas: int = 1) -> dict:
    """OpenRLHF's loss_batch_info for ``batch`` as the whole optimizer step of one rank."""
    mask = batch.action_mask.float()
    return {
        "dp_size": dp_size,
        "batch_num_tokens": mask.sum() * dp_size / gas,
        "global_batch_size": (mask.sum(-1) > 0).float().sum() * dp_size / gas,
    }
