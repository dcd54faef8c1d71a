"""SkyRL: ``PolicyLossRegistry.get(call)`` with an ``AlgorithmConfig`` (``trainer.algorithm``)
carrying the fields, fed as SkyRL's trainer and policy worker feed it.

SkyRL's trainer scales the advantages of the whole mini-batch (all ranks) with
``apply_loss_reduction_to_advantages_minibatch`` before dispatching it (micro_batch_size =
rows per micro-batch, ``max_seq_len`` from the config), advantages laid out per token (B, T);
each worker calls the loss on its micro-batch rows (a masked sum) and back-propagates it
times ``dp_size`` (``_forward_backward_micro``); DDP averages the ranks' gradients.
The rollout log-probs are the old log-probs (one behaviour policy: SkyRL's off-policy
correction is off, and its ``rollout_is``, whose ratio is against the rollout log-probs, is
then the registry's ``rollout_is`` against the old ones). Metrics: ``clip_ratio`` -> ``clip_frac``.
SkyRL takes exp of the log ratio in float32 (``safe_exp_delta``), so its float64 results agree
with the registry to about 2e-7.

Rollout corrections (``audit.corrections``): ``correction`` runs SkyRL's
``compute_off_policy_correction``, as its policy losses call it (``apply_off_policy_correction``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from gmpo_plugins.compare.audit.batches import Part
from gmpo_plugins.compare.audit.translations import Reference, sections

METRICS = {"clip_ratio": "clip_frac"}


def algorithm_config(config_class: Any, call: str, settings: Mapping[str, Any]) -> Any:
    """SkyRL's ``AlgorithmConfig`` for ``call``; ``<section>.<field>`` settings replace fields of its
    nested section configs (``sapo``, ``cispo``, ``clip_cov``, ...)."""
    top, nested = sections(settings)
    defaults = config_class()
    replaced = {name: dataclasses.replace(getattr(defaults, name), **fields) for name, fields in nested.items()}
    return config_class(policy_loss_type=call, **top, **replaced)


def micro_loss(reference: Reference, settings: Mapping[str, Any], part: Part) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch through SkyRL's policy-loss registry (module docstring)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import (
        PolicyLossRegistry,
        apply_loss_reduction_to_advantages_minibatch,
    )
    from skyrl.train.config import AlgorithmConfig

    config = algorithm_config(AlgorithmConfig, reference.call, settings)
    mask = part.case.mask.to(part.log_probs.dtype)
    rows_per_micro = len(part.rows)
    scaled = apply_loss_reduction_to_advantages_minibatch(
        advantages=part.case.advantages[:, None] * mask,
        loss_mask=mask,
        loss_reduction=config.loss_reduction,
        micro_batch_size=rows_per_micro,
        max_seq_len=config.max_seq_len,
    )
    loss, metrics = PolicyLossRegistry.get(reference.call)(
        part.take(part.log_probs),
        part.take(part.case.old_log_probs),
        part.take(scaled),
        config=config,
        loss_mask=part.take(mask),
        rollout_logprobs=part.take(part.case.old_log_probs),
    )
    return loss * part.ranks, {METRICS[key]: float(value) for key, value in metrics.items() if key in METRICS}


def correction(
    settings: Mapping[str, Any], old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(factor, counted) (B, T) of SkyRL's own off-policy correction (``audit.corrections``):
    ``compute_off_policy_correction`` with ``settings`` the fields of
    ``trainer.algorithm.off_policy_correction``; the loss is multiplied by its TIS ratio and
    reduced over the loss mask it returns. The count is the rollout's mask: SkyRL's trainer
    normalised the advantages by it before the loss (``apply_loss_reduction_to_advantages_minibatch``),
    so a masked token stays counted with weight 0."""
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import compute_off_policy_correction
    from skyrl.train.config import OffPolicyCorrectionConfig

    loss_mask = mask.to(old_log_probs.dtype)
    ratio, _, new_mask = compute_off_policy_correction(
        old_log_probs, rollout_log_probs, loss_mask, OffPolicyCorrectionConfig(**settings)
    )
    factor = new_mask if ratio is None else ratio * new_mask
    return factor, mask.bool()
