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

PREFIX = "gmpo/"
SKYRL_NAMES = {"clip_frac": "clip_ratio"}
LOGGED_BY_SKYRL = frozenset({"policy_loss"})

Scalar = torch.Tensor | float | int


def skyrl_metrics(metrics: Mapping[str, Scalar]) -> dict[str, float]:
    """SkyRL's metric dict from a ``LossOutput.metrics`` (scalar tensors or numbers), read in
    one device transfer. A metric that is not a scalar raises ValueError naming it."""
    keys = [key for key in metrics if key not in LOGGED_BY_SKYRL]
    device = next((v.device for v in metrics.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
    scalars = []
    for key in keys:
        value = metrics[key]
        if isinstance(value, torch.Tensor) and value.numel() != 1:
            raise ValueError(f"gmpo_plugins: metric {key!r} must be a scalar, got shape {tuple(value.shape)}")
        scalars.append(torch.as_tensor(value).detach().reshape(()).to(device=device, dtype=torch.float64))
    values = dict(zip(keys, torch.stack(scalars).tolist() if scalars else [], strict=True))
    out = {SKYRL_NAMES[key]: values[key] for key in SKYRL_NAMES if key in values}
    out.update({PREFIX + key: value for key, value in values.items()})
    return out
