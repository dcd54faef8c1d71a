"""A stand-in framework caller for the audit's own tests (no framework installed): the
registry loss itself with the global counts, its loss multiplied by the micro-batches per rank
when the translation's call is "scaled" (a trainer that forgets to divide by its accumulation
steps: split-dependent by exactly the number of micro-batches)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from gmpo_plugins.compare.audit.batches import Part
from gmpo_plugins.compare.audit.translations import Reference
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import BatchInfo, LossInputs


def micro_loss(reference: Reference, settings: Mapping[str, Any], part: Part) -> tuple[torch.Tensor, dict[str, float]]:
    loss_name = settings["loss"]
    hparams = dict(get_loss(loss_name).resolve({})) | dict(settings.get("hparams", {}))
    info = BatchInfo(dp_size=part.ranks, global_batch_size=part.global_rows, global_num_tokens=part.global_tokens)
    inputs = LossInputs(
        part.take(part.log_probs),
        part.take(part.case.old_log_probs),
        part.take(part.case.advantages),
        part.take(part.case.mask),
    )
    loss = get_loss(loss_name)(inputs, info, **hparams).loss
    return (loss * part.micro if reference.call == "scaled" else loss), {}


def correction(
    settings: Mapping[str, Any], old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The registry's own correction with ``settings["options"]``, its factor times
    ``settings["skew"]`` (a framework whose weights differ) and, with ``settings["count_all"]``,
    every valid token counted (a framework whose rejection leaves the count unchanged)."""
    from gmpo_plugins.compare.audit.corrections import registry_correction

    factor, counted, _ = registry_correction(settings["options"], old_log_probs, rollout_log_probs, mask)
    if settings.get("count_all"):
        counted = mask.bool()
    return factor * settings.get("skew", 1.0), counted
