"""Fused sequence-level losses (the GMPO family and GSPO) on top of ``clipped_row_sums``.

One pass over (B, T) yields per-sequence sums (``RowStats``); everything after it is
(B,)-sized torch code, so autograd differentiates it cheaply and hands
``g_i = dLoss/dsum_clipped_i`` to the 1-byte-mask backward of ``clipped_row_sums``:

    grad_log_probs_t = g_i * active_t,   e.g. for gmpo  g_i = c * (-A_i * w_i * rho_i / |o_i|)

with c the batch normalisation (``reduce_sequences``). The formulas are those of
``losses/gmpo.py`` and ``losses/gspo.py`` (whose eager versions stay the test oracle):

    gmpo          lo_i = -min(eps_low, R) if A_i < 0 else -R,  hi_i = min(eps_high, R) if A_i > 0 else R
                  s_i = sum_clipped_i / max(1, |o_i|)
    gmpo_noclip   lo_i = -R, hi_i = R, s_i as above
    gmpo_seqclip  lo_i = -R, hi_i = R, the one-sided clip of sum_clipped_i, then / max(1, |o_i|)
    gmpo_nonorm   bounds of gmpo, s_i = clamp(sum_clipped_i, -P, P)  (P = prepared.product_guard)
    gspo          lo_i = -R, hi_i = R, ratio_i = exp(s_i), PPO clip of ratio_i in ratio space

A KL term (``ref_log_probs``) needs a per-token gradient that is not a per-sequence
coefficient; it is added with the eager formula (``core/kl.py``) on top of the fused
policy term, so with a reference policy the call costs the KL's (B, T) temporaries.
Metrics equal ``core/metrics.py``'s, computed from the (B,) statistics.

Rollout IS weights under ``per_token`` (``prepared.IS_AGGREGATIONS``) scale each token's
gradient: the log-probs go into ``clipped_row_sums`` through
``prepared.per_token_is_gradient`` (same values, gradient scaled by w_t / mean_t w_t), which
costs (B, T) temporaries in that case only.
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.clip import one_sided_clip, required_eps
from gmpo_plugins.core.kernels.rowmean import row_masked_mean
from gmpo_plugins.core.kernels.rowsum import clipped_row_sums
from gmpo_plugins.core.kernels.stats import RowStats, compute_dtype
from gmpo_plugins.core.kl import reference_kl
from gmpo_plugins.core.prepared import LOG_RATIO_GUARD, per_token_is_gradient, product_guard, row_is_weights
from gmpo_plugins.core.reduce import masked_max, masked_mean, masked_min, reduce_sequences
from gmpo_plugins.core.types import BatchInfo, Impl, LossInputs, LossOutput


def sequence_advantages(inputs: LossInputs, dtype: torch.dtype) -> torch.Tensor:
    """(B,) advantages: as given, or the masked row mean of row-constant (B, T) ones."""
    advantages = inputs.advantages.detach()
    if advantages.dim() == 2:
        return row_masked_mean(advantages, inputs.mask, dtype)
    return advantages.to(dtype)


def _bounds(
    advantages: torch.Tensor, low: float | None, high: float | None, bound: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) (B,): the one-sided clip band by sign of A_i inside the guard [-R, R]."""
    lo = torch.full_like(advantages, -bound)
    hi = torch.full_like(advantages, bound)
    if low is not None:
        lo = lo.masked_fill(advantages < 0, -min(low, bound))
    if high is not None:
        hi = hi.masked_fill(advantages > 0, min(high, bound))
    return lo, hi


def row_metrics(
    count: torch.Tensor,
    sum_raw: torch.Tensor,
    raw_min: torch.Tensor,
    raw_max: torch.Tensor,
    low_tokens: torch.Tensor,
    high_tokens: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """``core/metrics.py``'s ``ratio_metrics`` from per-row values, all (B,): valid tokens,
    sum / min / max of the raw log ratio over them (min +inf, max -inf on an empty row),
    and the valid tokens whose clipped value was chosen on the low / high side."""
    with torch.no_grad():
        total = count.sum().clamp_min(1)
        low = low_tokens.sum() / total
        high = high_tokens.sum() / total
        rows = count > 0
        any_valid = rows.any()
        zero = torch.zeros((), dtype=total.dtype, device=total.device)
        seq_log_weight = sum_raw / count.clamp_min(1)
        seq_weight = torch.exp(seq_log_weight.clamp(-LOG_RATIO_GUARD, LOG_RATIO_GUARD))
        return {
            "clip_frac_low": low,
            "clip_frac_high": high,
            "clip_frac": low + high,
            "ppo_kl": -sum_raw.sum() / total,
            "log_ratio_min": torch.where(any_valid, raw_min.amin(), zero),
            "log_ratio_max": torch.where(any_valid, raw_max.amax(), zero),
            "seq_weight_min": masked_min(seq_weight, rows),
            "seq_weight_mean": masked_mean(seq_weight, rows),
            "seq_weight_max": masked_max(seq_weight, rows),
        }


def _bool_mask(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def _policy_log_probs(inputs: LossInputs, aggregation: str, dtype: torch.dtype) -> torch.Tensor:
    """log_probs for ``clipped_row_sums``: as given, or with the per-token IS gradient scale."""
    weights = inputs.rollout_is_weights
    if aggregation != "per_token" or weights is None or weights.dim() != 2:
        return inputs.log_probs
    return per_token_is_gradient(inputs.log_probs.to(dtype), weights, _bool_mask(inputs.mask), aggregation)


def _finish(
    inputs: LossInputs,
    batch: BatchInfo,
    stats: RowStats,
    pg: torch.Tensor,
    low_tokens: torch.Tensor,
    high_tokens: torch.Tensor,
    *,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    loss_name: str,
    is_aggregation: str,
) -> LossOutput:
    """``losses/finish.finish_sequence_loss`` on (B,) statistics (module docstring)."""
    dtype = pg.dtype
    rows = stats.count > 0
    weights = inputs.rollout_is_weights
    if weights is not None:
        weights = weights.detach()
        if weights.dim() == 1:
            rho = weights.to(dtype)
        elif is_aggregation == "geometric_mean":
            rho = row_is_weights(weights.to(dtype), _bool_mask(inputs.mask), is_aggregation)
        else:
            rho = row_masked_mean(weights, inputs.mask, dtype)
        pg = pg * rho
    policy_loss = reduce_sequences(pg, rows, batch)
    metrics = row_metrics(stats.count, stats.sum_raw, stats.raw_min, stats.raw_max, low_tokens, high_tokens)
    loss = policy_loss
    ref = None if inputs.ref_log_probs is None else inputs.ref_log_probs.detach().to(dtype)
    log_probs = inputs.log_probs if ref is None else inputs.log_probs.to(dtype)  # no copy without a KL term
    kl = reference_kl(log_probs, ref, beta=kl_beta, estimator=kl_estimator, clamp=kl_clamp, loss_name=loss_name)
    if kl is not None:
        mask = _bool_mask(inputs.mask)
        metrics["kl"] = masked_mean(kl, mask).detach()
        loss = loss + kl_beta * reduce_sequences(masked_mean(kl, mask, dim=-1), rows, batch)
    metrics["policy_loss"] = policy_loss.detach()
    return LossOutput(loss=loss, metrics=metrics)


def fused_geometric_mean_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    clip: str,
    normalise: bool,
    kl_beta: float,
    kl_estimator: str,
    log_ratio_bound: float,
    rollout_is_aggregation: str = "geometric_mean",
    kl_clamp: float | None = None,
    eps_low: float | None = None,
    eps_high: float | None = None,
    loss_name: str = "gmpo",
    impl: Impl = "auto",
) -> LossOutput:
    """The GMPO family (``losses/gmpo.geometric_mean_loss``), fused; ``clip`` is
    ``"token"``, ``"sequence"`` or ``"none"``."""
    if clip != "none":
        required_eps(clip, eps_low, eps_high)  # a missing bound is refused before any work
    dtype = compute_dtype(inputs.log_probs.dtype)
    advantages = sequence_advantages(inputs, dtype)
    positive, negative = advantages > 0, advantages < 0
    bound = log_ratio_bound
    token_clip = clip == "token"
    lo, hi = _bounds(advantages, eps_low if token_clip else None, eps_high if token_clip else None, bound)
    log_probs = _policy_log_probs(inputs, rollout_is_aggregation, dtype)
    stats = clipped_row_sums(log_probs, inputs.old_log_probs, inputs.mask, lo, hi, impl=impl)
    rows = stats.count > 0
    zeros = torch.zeros_like(stats.count)
    low_tokens = high_tokens = zeros
    if token_clip:
        # below/above count tokens outside [lo, hi]; they are clipped (not guarded) only
        # where the band is the eps one, i.e. eps < R.
        eps_low, eps_high = required_eps(clip, eps_low, eps_high)
        if eps_low < bound:
            low_tokens = torch.where(negative, stats.below, zeros)
        if eps_high < bound:
            high_tokens = torch.where(positive, stats.above, zeros)
    summed = stats.sum_clipped
    if clip == "sequence":
        eps = required_eps(clip, eps_low, eps_high)
        summed, seq_low, seq_high = one_sided_clip(summed, positive & rows, negative & rows, *eps)
        low_tokens = torch.where(seq_low, stats.count, zeros)
        high_tokens = torch.where(seq_high, stats.count, zeros)
    if normalise:
        s = summed / stats.count.clamp_min(1)
    else:
        guard = product_guard(inputs.log_probs.dtype)
        s = summed.clamp(-guard, guard)
    pg = -advantages * torch.exp(s)
    return _finish(
        inputs,
        batch,
        stats,
        pg,
        low_tokens,
        high_tokens,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name=loss_name,
        is_aggregation=rollout_is_aggregation,
    )


def fused_gspo_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    eps_low: float,
    eps_high: float,
    kl_beta: float,
    kl_estimator: str,
    log_ratio_bound: float,
    rollout_is_aggregation: str = "per_token",
    kl_clamp: float | None = None,
    impl: Impl = "auto",
) -> LossOutput:
    """GSPO (``losses/gspo.gspo_loss``), fused."""
    dtype = compute_dtype(inputs.log_probs.dtype)
    advantages = sequence_advantages(inputs, dtype)
    lo, hi = _bounds(advantages, None, None, log_ratio_bound)
    log_probs = _policy_log_probs(inputs, rollout_is_aggregation, dtype)
    stats = clipped_row_sums(log_probs, inputs.old_log_probs, inputs.mask, lo, hi, impl=impl)
    ratio = torch.exp(stats.sum_clipped / stats.count.clamp_min(1))
    pg = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    zeros = torch.zeros_like(stats.count)
    high_tokens = torch.where((advantages > 0) & (ratio > 1.0 + eps_high), stats.count, zeros)
    low_tokens = torch.where((advantages < 0) & (ratio < 1.0 - eps_low), stats.count, zeros)
    return _finish(
        inputs,
        batch,
        stats,
        pg,
        low_tokens,
        high_tokens,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="gspo",
        is_aggregation=rollout_is_aggregation,
    )
