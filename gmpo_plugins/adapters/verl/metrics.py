"""Core loss metrics -> the metric dict a verl policy loss returns (Python floats).

    clip_frac       -> actor/pg_clipfrac        tokens whose clipped value was chosen, both
                                                sides (verl's vanilla: same meaning)
    ppo_kl          -> actor/ppo_kl             mean over valid tokens of old - new log-prob
    clip_frac_dual  -> actor/pg_clipfrac_lower  verl's vanilla logs the DUAL-clip fraction
                                                (A < 0 tokens capped at -A * clip_ratio_c)
                                                under this name; 0.0 for losses without a
                                                dual clip (the gmpo family, gspo)
    every key k     -> actor/gmpo/k             e.g. actor/gmpo/clip_frac_low,
                                                actor/gmpo/seq_weight_max
    except policy_loss, which verl's ppo_loss logs itself as actor/pg_loss (summed over
    micro-batches; our key would be averaged).

``ppo_loss`` wraps each value in ``verl.utils.metric.Metric`` with MEAN aggregation over
micro-batches and data-parallel ranks; so the ``*_min`` / ``*_max`` keys are means of the
micro-batch minima / maxima (verl offers no per-key aggregation for loss metrics).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from gmpo_plugins.adapters._common import scalar_metrics

PREFIX = "actor/gmpo/"
VERL_NAMES = {"clip_frac": "actor/pg_clipfrac", "ppo_kl": "actor/ppo_kl"}
DUAL = "actor/pg_clipfrac_lower"
LOGGED_BY_VERL = frozenset({"policy_loss"})

Scalar = torch.Tensor | float | int


def verl_metrics(metrics: Mapping[str, Scalar]) -> dict[str, float]:
    """verl's metric dict from a ``LossOutput.metrics`` (scalar tensors or numbers).

    Tensors are read in one device transfer. A metric that is not a scalar raises
    ValueError naming it (verl's Metric would reject it later, without the name).
    """
    values = scalar_metrics(metrics, LOGGED_BY_VERL)

    out = {VERL_NAMES[key]: values[key] for key in VERL_NAMES if key in values}
    out[DUAL] = values.get("clip_frac_dual", 0.0)
    out.update({PREFIX + key: value for key, value in values.items()})
    return out
