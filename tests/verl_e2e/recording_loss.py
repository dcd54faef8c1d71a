"""A loss that records what verl hands a policy loss (test-only; never shipped).

``loss_mode=recorded_gmpo`` is gmpo-plugins' ``gmpo`` (verl's ``get_policy_loss_fn("gmpo")``,
the adapter's function) that first saves its inputs, as verl's ``ppo_loss`` passes them, to
``$GMPO_RECORD_DIR/call_<pid>_<n>.pt``: ``old_log_prob``, ``log_prob``, ``advantages``,
``response_mask`` and ``rollout_is_weights`` (None when verl passes none), detached. The
bypass/decoupled tests read them to show which log-probs, importance weights and mask reach
a registry loss under ``algorithm.rollout_correction``. Imported in every Ray process
through ``VERL_USE_EXTERNAL_MODULES``; without ``GMPO_RECORD_DIR`` nothing is saved.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn, register_policy_loss

NAME = "recorded_gmpo"
DIR_ENV = "GMPO_RECORD_DIR"
_calls = itertools.count()


@register_policy_loss(NAME)
def recorded_gmpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
):
    folder = os.environ.get(DIR_ENV)
    if folder:
        os.makedirs(folder, exist_ok=True)
        record = {
            "old_log_prob": old_log_prob.detach().cpu(),
            "log_prob": log_prob.detach().cpu(),
            "advantages": advantages.detach().cpu(),
            "response_mask": response_mask.detach().cpu(),
            "rollout_is_weights": None if rollout_is_weights is None else rollout_is_weights.detach().cpu(),
        }
        torch.save(record, os.path.join(folder, f"call_{os.getpid()}_{next(_calls)}.pt"))
    return get_policy_loss_fn("gmpo")(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        config=config,
        rollout_is_weights=rollout_is_weights,
    )
