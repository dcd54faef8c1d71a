"""OpenRLHF's train/rollout IS correction as the registry's ``rollout_is_weights``.

OpenRLHF 0.11.2 (``--algo.advantage.is_correction_*``, applied in ``PolicyLoss.forward`` for
its ppo) multiplies each token's loss by a detached coefficient computed from the old
(train) and rollout log-probs, then reduces as usual. Per token, with
rho_t = exp(old_t - rollout_t), p_t = exp(rollout_t), q_t = exp(old_t) (both clamped to
[1e-6, 1 - 1e-6] for the divergences) and [low, high] = ``_threshold``:

    gating ratio       s_t = rho_t        (level seq: exp(mean over the row of log rho))
    gating binary_kl   s_t = p log(p/q) + (1 - p) log((1 - p)/(1 - q))   (seq: the row's mean)
    gating tv          s_t = |p - q|                                     (seq: the row's mean)
    mode mask          c_t = rho_t if low <= s_t <= high else 0
    mode clip          c_t = clamp(s_t, low, high)   (OpenRLHF allows it for token/ratio only)

A registry loss multiplies each token's term by its rollout IS weight ``w_t`` (sequence-level
losses aggregate the weights per sequence by their ``rollout_is_aggregation``), so
``w_t = c_t`` is OpenRLHF's correction exactly for a token-level loss, and every level, mode
and gating is expressible. A dropped token is a zero weight, not a change of the mask:
OpenRLHF keeps it in the token count it divides by, and so does the loss's ``BatchInfo``
(a sequence-level loss removes a zero-weight token from its row's aggregate instead:
``core.correction``, the zero-weight rule).
Weights at padding are 0. Shapes: every tensor (B, T).

Transport only: OpenRLHF 0.11.2 asks vLLM for the rollout log-probs only when
``--algo.advantage.is_correction_level`` is not off. ``PASS_ONLY`` (level token, mode clip,
gating ratio, threshold 1 1: every c_t = clamp(rho_t, 1, 1) = 1) turns them on without a
correction of OpenRLHF's, so that the registry's own correction (``core.correction``) or a
loss that reads them (``decoupled_ppo``) can use them.

Also returned, as OpenRLHF returns them: ``vllm_kl`` (mean of rollout - old over valid
tokens) and ``is_filter_ratio`` (the fraction of units outside the band: tokens, or rows at
level seq).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gmpo_plugins.adapters.inputs import ROLLOUT_SETTINGS


@dataclass(frozen=True)
class ISCorrection:
    """OpenRLHF's ``is_correction_level`` (token or seq), ``_mode``, ``_gating``, ``_threshold``."""

    level: str
    mode: str
    gating: str
    threshold: tuple[float, float]

    @property
    def pass_only(self) -> bool:
        """True for ``PASS_ONLY``: every weight is 1, only the log-probs are passed."""
        return self == PASS_ONLY


PASS_ONLY = ISCorrection("token", "clip", "ratio", (1.0, 1.0))
PASS_ONLY_FLAGS = ROLLOUT_SETTINGS["openrlhf"]
"""The correction of weight 1 everywhere, and its flags: rollout log-probs without OpenRLHF's correction."""


def _masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """OpenRLHF's masked_mean: sum(values * mask) / sum(mask) (NaN for an empty row, as there)."""
    if dim is None:
        return (values * mask).sum() / mask.sum()
    return (values * mask).sum(dim=dim) / mask.sum(dim=dim)


def rollout_is_weights(
    correction: ISCorrection, old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weights (B, T) detached, vllm_kl (), is_filter_ratio ()) for OpenRLHF's correction
    (module docstring). ``mask`` (B, T) 0/1 or bool: the valid tokens."""
    with torch.no_grad():
        low, high = correction.threshold
        seq_level = correction.level == "seq"
        weight_mask = mask.to(old_log_probs.dtype)
        is_log_ratio = old_log_probs.detach() - rollout_log_probs.detach()
        token_is = is_log_ratio.exp()
        if correction.gating == "ratio":
            stat = _masked_mean(is_log_ratio, weight_mask, dim=-1).unsqueeze(-1) if seq_level else is_log_ratio
            stat = stat.exp()
        else:
            p = rollout_log_probs.detach().exp().clamp(1e-6, 1 - 1e-6)
            q = old_log_probs.detach().exp().clamp(1e-6, 1 - 1e-6)
            if correction.gating == "binary_kl":
                stat = p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()
            else:
                stat = (p - q).abs()
            if seq_level:
                stat = _masked_mean(stat, weight_mask, dim=-1).unsqueeze(-1)
        if correction.mode == "clip":
            coef = stat.clamp(min=low, max=high)
            filtered = (stat < low) | (stat > high)
        else:
            keep = (stat >= low) & (stat <= high)
            coef = torch.where(keep, token_is, 0.0)
            filtered = ~keep
        weights = torch.where(mask.bool(), coef.expand_as(token_is), 0.0)
        if seq_level:
            filter_ratio = filtered.float().mean()
        else:
            filter_ratio = _masked_mean(filtered.float(), weight_mask)
        vllm_kl = _masked_mean(rollout_log_probs.detach() - old_log_probs.detach(), weight_mask)
    return weights, vllm_kl, filter_ratio
