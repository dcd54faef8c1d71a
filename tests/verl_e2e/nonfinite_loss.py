"""A loss fed one NaN advantage, to see what verl's trainer does with a non-finite gradient
(test-only; never shipped).

``loss_mode=nonfinite_gmpo`` is gmpo-plugins' ``gmpo`` (verl's ``get_policy_loss_fn("gmpo")``,
the adapter's function) called with the advantage of the first valid token of the micro-batch's
first row replaced by NaN: a bad input at a valid position, as a broken reward or advantage
estimator would give. The registry's rule makes the loss and the gradient NaN; verl's engine
then skips the optimiser step (``optimizer_step``: zero_grad when the grad norm is not
finite). Imported in every Ray process through ``VERL_USE_EXTERNAL_MODULES``.

Forced non-default path: the call sets ``GMPO_PLUGINS_VALIDATE=never`` in its worker process
first, the state of every call after a process's first. On the default path the first call checks
values and raises naming the input, which stops the run before verl sees a gradient (at verl's
call site: tests/verl/test_nonfinite.py). Only this run's workers call this loss.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn, register_policy_loss

from gmpo_plugins.adapters._common import VALIDATE_ENV

NAME = "nonfinite_gmpo"


@register_policy_loss(NAME)
def nonfinite_gmpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
):
    os.environ[VALIDATE_ENV] = "never"
    column = int(response_mask[0].nonzero()[0, 0])
    bad = advantages.clone()
    bad[0, column] = float("nan")
    return get_policy_loss_fn("gmpo")(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=bad,
        response_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        config=config,
        rollout_is_weights=rollout_is_weights,
    )
