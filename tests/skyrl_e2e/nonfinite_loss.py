"""A loss fed one NaN advantage, to see what SkyRL's trainer does with a non-finite gradient
(test-only; never shipped).

``policy_loss_type=nonfinite_gmpo`` is gmpo-plugins' SkyRL ``gmpo`` called with the advantage of
the first valid token of the micro-batch's first row replaced by NaN: a bad input at a valid
position, as a broken reward or advantage estimator would give. The registry's rule makes the
loss and the gradient NaN; SkyRL's FSDP strategy then skips the optimiser step
(``optimizer_step``: zero_grad when the clipped grad norm is not finite, clipping being on).
Registered in the driver before Ray starts; SkyRL ships it to the workers through its registry
actor.

Forced non-default path: the call sets ``GMPO_PLUGINS_VALIDATE=never`` in its worker process
first, the state of every call after a process's first. On the default path the first call checks
values and raises naming the input, which stops the run before SkyRL sees a gradient (the same
check as at every adapter's call site: tests/core/test_nonfinite.py). Only this run's workers
call this loss.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from gmpo_plugins.adapters._common import VALIDATE_ENV
from gmpo_plugins.adapters.skyrl import SkyRLPolicyLoss

NAME = "nonfinite_gmpo"


class NonfiniteGMPO:
    """``gmpo`` through the SkyRL adapter with one NaN advantage (module docstring)."""

    def __init__(self) -> None:
        self.inner = SkyRLPolicyLoss("gmpo", NAME)

    def __call__(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, **kwargs: Any
    ) -> tuple[torch.Tensor, dict]:
        os.environ[VALIDATE_ENV] = "never"
        column = int(kwargs["loss_mask"][0].nonzero()[0, 0])
        bad = advantages.clone()
        bad[0, column] = float("nan")
        return self.inner(log_probs, old_log_probs, bad, **kwargs)


def register() -> None:
    """Add the loss to SkyRL's PolicyLossRegistry (once)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    if NAME not in PolicyLossRegistry.list_available():
        PolicyLossRegistry.register(NAME, NonfiniteGMPO())
