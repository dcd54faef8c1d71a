"""A registry loss as a verl policy-loss function (verl's exact keyword signature).

verl's ``ppo_loss`` (verl/workers/utils/losses.py) calls, once per micro-batch,

    fn(old_log_prob=(B, T) float, log_prob=(B, T) float, advantages=(B, T) float,
       response_mask=(B, T) bool, loss_agg_mode=str, config=actor config,
       rollout_is_weights=(B, T) float or None) -> (scalar loss, {metric name: float})

and back-propagates the loss unscaled. The function built here only translates:

    LossInputs(log_probs=log_prob, old_log_probs=old_log_prob, advantages=advantages,
               mask=response_mask, rollout_is_weights=rollout_is_weights)
    BatchInfo from config.global_batch_info, hyper-parameters from the config fields
    (``options``), metrics to verl's names (``metrics``)

and calls ``spec(inputs, batch, **hparams)``: the loss math is the registry's. ``T`` may
differ between micro-batches (verl pads each to its own longest response); no
translation depends on it.

The first call in a process (rank 0) logs which rollout correction reached the loss
(``say_rollout_correction``): verl's IS weights (decoupled ``algorithm.rollout_correction``),
or none, with what bypass mode does not apply to a registry loss (checks.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from gmpo_plugins.adapters._common import value_checks_enabled
from gmpo_plugins.adapters.hparam_sources import make_visible, rank
from gmpo_plugins.adapters.verl.metrics import verl_metrics
from gmpo_plugins.adapters.verl.options import batch_info_from_config, hparams_from_config
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import LossInputs

MARKER = "__gmpo_plugins_loss__"

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]

logger = logging.getLogger(__name__)
_said: set[str] = set()


def say_rollout_correction(loss_mode: str, rollout_is_weights: torch.Tensor | None) -> None:
    """Log once per process and ``loss_mode`` (rank 0) whether verl passed IS weights."""
    if loss_mode in _said:
        return
    _said.add(loss_mode)
    if rank() != 0:
        return
    make_visible()
    if rollout_is_weights is not None:
        what = (
            f"verl's, shape {tuple(rollout_is_weights.shape)} (decoupled algorithm.rollout_correction: each "
            "token's term multiplied once; its rejections are zeros in response_mask)"
        )
    else:
        what = (
            "none (algorithm.rollout_correction.rollout_is null, or bypass_mode=true: then old_log_prob is the "
            "rollout's log-probs and verl's rollout_is, rollout_rs and loss_type=reinforce do not apply to a "
            "registry loss)"
        )
    logger.info("gmpo_plugins: verl loss_mode=%s: rollout_is_weights: %s", loss_mode, what)


def make_policy_loss(spec: LossSpec, loss_mode: str) -> PolicyLossFn:
    """verl policy loss computing ``spec``; ``loss_mode`` is the name it is registered under
    (used in messages). The function carries ``__gmpo_plugins_loss__ = spec.name``."""

    def policy_loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any | None = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        hparams = hparams_from_config(spec, config, loss_agg_mode, loss_mode)
        say_rollout_correction(loss_mode, rollout_is_weights)
        inputs = LossInputs(
            log_probs=log_prob,
            old_log_probs=old_log_prob,
            advantages=advantages,
            mask=response_mask,
            rollout_is_weights=rollout_is_weights,
        )
        batch = batch_info_from_config(config, spec, hparams, loss_mode)
        out = spec(inputs, batch, validate=value_checks_enabled(f"verl:{loss_mode}"), **hparams)
        return out.loss, verl_metrics(out.metrics)

    policy_loss.__name__ = policy_loss.__qualname__ = f"gmpo_plugins_{spec.name}"
    policy_loss.__doc__ = f"gmpo-plugins loss {spec.name!r} ({spec.description}) as verl loss_mode={loss_mode}."
    setattr(policy_loss, MARKER, spec.name)
    return policy_loss
