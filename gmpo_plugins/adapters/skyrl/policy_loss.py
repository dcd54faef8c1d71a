"""A registry loss as a SkyRL policy-loss function (SkyRL's exact signature).

SkyRL's policy worker (``skyrl/backends/skyrl_train/workers/worker.py``, and the Megatron
wrapper) calls, once per micro-batch,

    fn(log_probs=(B, T) float, old_log_probs=(B, T) float, advantages=(B, T) float
       (pre-scaled), config=AlgorithmConfig, loss_mask=(B, T) 0/1 or None,
       rollout_logprobs=(B, T) float or None) -> (scalar loss, {metric name: float})

and back-propagates ``loss * dp_size`` (plus its own KL and entropy terms). The callable
built here only translates:

    hyper-parameters from config fields, advantages and BatchInfo from SkyRL's scaling
    (``options``), rollout IS weights from off_policy_correction (``off_policy``),
    ``rollout_logprobs`` as ``LossInputs.rollout_log_probs`` where the call reads them
    (refused by name when None: ``options.refuse_no_rollout``), among them the ratio's
    anchor under ``cispo.cispo_anchor="rollout"`` (the core's ``rollout_bypass``),
    metrics to SkyRL's names (``metrics``)

and calls the registry loss: the loss math is the registry's. It is a small picklable
object holding two names (SkyRL ships registered functions to its Ray workers with
cloudpickle; the worker looks the loss up in its own gmpo_plugins registry).
"""

from __future__ import annotations

from typing import Any

import torch

from gmpo_plugins.adapters._common import value_checks_enabled
from gmpo_plugins.adapters.load_failure import PluginLoadError, load_failure_message
from gmpo_plugins.adapters.skyrl.metrics import skyrl_metrics
from gmpo_plugins.adapters.skyrl.off_policy import rollout_is_weights
from gmpo_plugins.adapters.skyrl.options import (
    core_advantages,
    hparams_from_config,
    max_seq_len,
    refuse_no_rollout,
)
from gmpo_plugins.core.registry import LossNameCollisionError, get_loss
from gmpo_plugins.core.types import LossInputs

REGISTERED_BY = (
    "registered by gmpo_plugins.adapters.skyrl.register_losses, synced to this process through SkyRL's Ray "
    "registry actor"
)


class SkyRLPolicyLoss:
    """SkyRL policy loss computing registry loss ``loss``, registered as ``policy_loss_type``."""

    def __init__(self, loss: str, policy_loss_type: str) -> None:
        self.loss = loss
        self.policy_loss_type = policy_loss_type

    def __repr__(self) -> str:
        return f"SkyRLPolicyLoss(loss={self.loss!r}, policy_loss_type={self.policy_loss_type!r})"

    def __call__(
        self,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        config: Any = None,
        loss_mask: torch.Tensor | None = None,
        rollout_logprobs: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        try:
            spec = get_loss(self.loss)
        except LossNameCollisionError:  # the registry refuses this name only, naming both distributions
            raise
        except Exception as error:  # a worker whose registry cannot load: say so, not "unknown loss"
            setting = f"SkyRL policy_loss_type {self.policy_loss_type!r}"
            raise PluginLoadError(load_failure_message(setting, REGISTERED_BY, error)) from error
        hparams = hparams_from_config(spec, config, self.policy_loss_type)
        if loss_mask is None:  # SkyRL's own losses then sum every position
            loss_mask = torch.ones_like(log_probs, dtype=torch.bool)
        reduction = config.loss_reduction
        length = max_seq_len(config, self.policy_loss_type) if reduction == "seq_mean_token_sum_norm" else None
        core_adv, batch = core_advantages(advantages, loss_mask, reduction, length)
        reads_rollout = "rollout_log_probs" in spec.inputs_for(hparams)  # passed only then
        if rollout_logprobs is None:
            refuse_no_rollout(spec, hparams, config, self.policy_loss_type)
        weights, metrics = rollout_is_weights(config, old_log_probs, rollout_logprobs, loss_mask, self.policy_loss_type)
        inputs = LossInputs(
            log_probs=log_probs,
            old_log_probs=old_log_probs,
            advantages=core_adv,
            mask=loss_mask,
            rollout_log_probs=rollout_logprobs if reads_rollout else None,
            rollout_is_weights=weights,
        )
        out = spec(inputs, batch, validate=value_checks_enabled(f"skyrl:{self.policy_loss_type}"), **hparams)
        return out.loss, {**skyrl_metrics(out.metrics), **metrics}
