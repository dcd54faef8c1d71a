"""A deliberately split-dependent loss for the invariance test (test-only; never shipped).

``policy_loss_type=split_dependent_gmpo`` is gmpo-plugins' SkyRL ``gmpo`` divided by the number
of sequences in the *micro-batch* it is given: the common mistake of a local mean on top of
SkyRL's pre-scaled sum. Over k micro-batches (or ranks) of a mini-batch of B sequences its
gradient is k/B times gmpo's (each micro-batch divided by its B/k sequences): it changes with
the split, so the invariance check must reject it. Registered in the driver before Ray
starts; SkyRL ships it to the workers through its registry actor.
"""

from __future__ import annotations

from typing import Any

import torch

from gmpo_plugins.adapters.skyrl import SkyRLPolicyLoss

NAME = "split_dependent_gmpo"


class SplitDependentGMPO:
    """``gmpo`` through the SkyRL adapter, then divided by the micro-batch's sequence count."""

    def __init__(self) -> None:
        self.inner = SkyRLPolicyLoss("gmpo", NAME)

    def __call__(self, log_probs: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, dict]:
        loss, metrics = self.inner(log_probs, *args, **kwargs)
        return loss / log_probs.shape[0], metrics


def register() -> None:
    """Add the loss to SkyRL's PolicyLossRegistry (once)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    if NAME not in PolicyLossRegistry.list_available():
        PolicyLossRegistry.register(NAME, SplitDependentGMPO())
