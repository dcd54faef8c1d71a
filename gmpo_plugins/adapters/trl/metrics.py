"""Core loss metrics -> GRPOTrainer's metric store, under TRL's names, gathered as TRL does.

    clip_frac_low   -> clip_ratio/low_mean      token means over all processes: the
    clip_frac_high  -> clip_ratio/high_mean     (sum, count) pairs are summed across
    clip_frac       -> clip_ratio/region_mean   processes, as GRPOTrainer's
    clip_frac_dual  -> clip_ratio/dual_mean     ``global_masked_mean`` does
    kl, ppo_kl      -> kl, ppo_kl
    seq_weight_mean -> seq_weight_mean          mean over sequences with valid tokens
    *_min / *_max   -> same name                min / max over processes
    policy_loss     -> policy_loss              the loss without KL times the accumulation
                                                steps G (so it does not depend on G),
                                                mean over processes as TRL logs it
    anything else   -> same name                mean over processes

The clip fractions have the core's single meaning: tokens whose clipped value was chosen
(A < 0 below the band, A > 0 above it) over valid tokens; for the gmpo family this is
exactly TRL's GMPOTrainer definition. TRL's per-sequence ``clip_ratio/low_min`` and
``clip_ratio/high_max`` are not logged (the core returns no per-sequence clip fractions).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import torch

TRL_NAMES = {
    "clip_frac_low": "clip_ratio/low_mean",
    "clip_frac_high": "clip_ratio/high_mean",
    "clip_frac": "clip_ratio/region_mean",
    "clip_frac_dual": "clip_ratio/dual_mean",
}
# TRL's metric names back to the core's (compare reads what TRL's trainer logged)
FROM_TRL = {trl: core for core, trl in TRL_NAMES.items()}
TOKEN_MEANS = frozenset({"clip_frac_low", "clip_frac_high", "clip_frac", "clip_frac_dual", "kl", "ppo_kl"})
SEQUENCE_MEANS = frozenset({"seq_weight_mean"})


def global_mean(accelerator: Any, local_mean: torch.Tensor, local_count: torch.Tensor) -> float:
    """Mean over all processes of a quantity whose local mean over ``local_count`` items is given."""
    count = local_count.to(local_mean.dtype)
    totals = accelerator.reduce(torch.stack([local_mean * count, count]), reduction="sum")
    return (totals[0] / totals[1].clamp(min=1.0)).item()


def global_masked_mean(accelerator: Any, values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of ``values`` (B, T) over the valid tokens of all processes."""
    mask = mask.to(values.dtype)
    count = mask.sum()
    return global_mean(accelerator, (values * mask).sum() / count.clamp(min=1.0), count)


def log_loss_metrics(
    store: MutableMapping[str, list],
    accelerator: Any,
    metrics: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    accumulation_steps: int,
) -> None:
    """Append the gathered value of every core metric to ``store`` (``trainer._metrics[mode]``)."""
    tokens = mask.sum()
    sequences = (mask.sum(-1) > 0).sum()
    for key, value in metrics.items():
        name = TRL_NAMES.get(key, key)
        value = value.detach().float()
        if key == "policy_loss":
            store[name].append(accelerator.gather(value * accumulation_steps).nanmean().item())
        elif key in TOKEN_MEANS:
            store[name].append(global_mean(accelerator, value, tokens))
        elif key in SEQUENCE_MEANS:
            store[name].append(global_mean(accelerator, value, sequences))
        elif key.endswith("_min"):
            store[name].append(accelerator.gather(value).min().item())
        elif key.endswith("_max"):
            store[name].append(accelerator.gather(value).max().item())
        else:
            store[name].append(accelerator.gather(value).nanmean().item())
