"""Metrics every built-in loss reports, with one meaning everywhere.

All metrics are detached 0-dim tensors computed over the valid tokens of the
micro-batch; none forces a host-device synchronisation.

    clip_frac_low    fraction of valid tokens whose clipped value was chosen on the
                     low side (A < 0, ratio below the band)
    clip_frac_high   same on the high side (A > 0, ratio above the band)
    clip_frac        clip_frac_low + clip_frac_high
    ppo_kl           mean over valid tokens of (old - new) log-prob
    log_ratio_min/max         range of the raw per-token log importance ratio
    seq_weight_min/mean/max   range of the raw per-sequence geometric-mean ratio
                              exp(mean_t r_t), over sequences with valid tokens
                              (the quantity of the GMPO paper's Figure 1; the same
                              definition for every loss so runs can be compared)
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.prepared import LOG_RATIO_GUARD, PreparedBatch
from gmpo_plugins.core.reduce import masked_max, masked_mean, masked_min


def ratio_metrics(
    batch: PreparedBatch, clipped_low: torch.Tensor, clipped_high: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Shared metrics; ``clipped_low``/``clipped_high`` are (B, T) bool tokens whose
    clipped value was chosen (only valid tokens are counted)."""
    mask, r = batch.mask, batch.log_ratio
    with torch.no_grad():
        r = r.detach()
        low = masked_mean(clipped_low.to(r.dtype), mask)
        high = masked_mean(clipped_high.to(r.dtype), mask)
        seq_log_weight = r.sum(-1) / batch.lengths.clamp_min(1)
        seq_weight = torch.exp(seq_log_weight.clamp(-LOG_RATIO_GUARD, LOG_RATIO_GUARD))
        return {
            "clip_frac_low": low,
            "clip_frac_high": high,
            "clip_frac": low + high,
            "ppo_kl": masked_mean(-r, mask),
            "log_ratio_min": masked_min(r, mask),
            "log_ratio_max": masked_max(r, mask),
            "seq_weight_min": masked_min(seq_weight, batch.rows),
            "seq_weight_mean": masked_mean(seq_weight, batch.rows),
            "seq_weight_max": masked_max(seq_weight, batch.rows),
        }
