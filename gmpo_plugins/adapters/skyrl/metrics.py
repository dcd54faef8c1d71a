"""Core loss metrics -> the metric dict a SkyRL policy loss returns (Python floats).

SkyRL's worker logs each key ``k`` as ``loss_metrics/k``, averaged over micro-batches and
data-parallel ranks, except keys ending in ``_min`` / ``_max`` (min / max) and in
``_loss`` (summed, for pre-scaled losses).

    clip_frac   -> clip_ratio          tokens whose clipped value was chosen (SkyRL's name;
                                       its ``regular`` loss logs the same fraction)
    every key k -> gmpo/k              e.g. gmpo/clip_frac_low, gmpo/ppo_kl,
                                       gmpo/seq_weight_max (reduced as a max by SkyRL)
    except policy_loss, which SkyRL's worker logs itself as ``policy_loss``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from gmpo_plugins.adapters._common import scalar_metrics

PREFIX = "gmpo/"
SKYRL_NAMES = {"clip_frac": "clip_ratio"}
LOGGED_BY_SKYRL = frozenset({"policy_loss"})

Scalar = torch.Tensor | float | int


def skyrl_metrics(metrics: Mapping[str, Scalar]) -> dict[str, float]:
    """SkyRL's metric dict from a ``LossOutput.metrics`` (scalar tensors or numbers), read in
    one device transfer. A metric that is not a scalar raises ValueError naming it."""
    values = scalar_metrics(metrics, LOGGED_BY_SKYRL)
    out = {SKYRL_NAMES[key]: values[key] for key in SKYRL_NAMES if key in values}
    out.update({PREFIX + key: value for key, value in values.items()})
    return out
