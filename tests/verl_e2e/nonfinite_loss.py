"""A loss fed one NaN advantage, to see what verl's trainer does with a non-finite gradient
(test-only; never shipped).

``loss_mode=nonfinite_gmpo`` is gmpo-plugins' ``gmpo`` (verl's ``get_policy_loss_fn("gmpo")``,
the adapter's function) called with the advantage of the first valid token of the micro-batch's
first row replaced by NaN: a bad input at a valid position, as a broken reward or advantage
estimator would give. The registry's rule makes the loss and the gradient NaN; verl's engine
then skips the optimiser step (``optimizer_step``: zero_grad when the grad norm is not
finite). Imported in every Ray process through ``VERL_USE_EXTERNAL_MODULES``.
"""

from __future__ import annotations

from typing import Any

import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn, register_policy_loss

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
