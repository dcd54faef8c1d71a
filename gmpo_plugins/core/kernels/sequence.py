"""Fused sequence-level losses (the GMPO family and GSPO) on top of ``sequence_rows``.

One pass over (B, T) (``sequence_rows``, one custom operator) yields each row's value
(the mean or sum of its clipped log ratios), ``tail.RowStats`` and the metrics; everything
after it is (B,)-sized torch code, and the loss tail (``core/tail.py``) is the eager path's
own. Autograd differentiates the (B,) part and hands g_i = dLoss/dvalue_i to the 1-byte-mask
backward of ``sequence_rows``:

    grad_log_probs_t = g_i * active_t (/ |o_i|),   e.g. for gmpo  g_i = -A_i * w_i * rho_i * u_i

with u_i the batch reduction weight (``reduce.row_weights``). The formulas are those of
``losses/gmpo.py`` and ``losses/gspo.py`` (whose eager versions stay the test oracle):

    gmpo          bounds -min(eps_low, R) where A_i < 0, min(eps_high, R) where A_i > 0, else -R / R
                  s_i = mean of the clipped log ratios
    gmpo_noclip   bounds -R, R; s_i as above
    gmpo_seqclip  bounds -R, R; the one-sided clip of the sum, then / max(1, |o_i|)
    gmpo_nonorm   bounds of gmpo, s_i = clamp(sum, -P, P)  (P = prepared.product_guard)
    gspo          bounds -R, R; ratio_i = exp(s_i), PPO clip of ratio_i in ratio space

A KL term (``ref_log_probs``) needs a per-token gradient that is not a per-sequence
coefficient; it is added with the eager formula (``tail.kl_rows``) on top of the fused
policy term, so with a reference policy the call costs the KL's (B, T) temporaries.

Rollout IS weights under ``per_token`` (``prepared.IS_AGGREGATIONS``) scale each token's
gradient: the log-probs go into the pass through ``prepared.per_token_is_gradient`` (same
values, gradient scaled by w_t / mean_t w_t), which costs (B, T) temporaries in that case only.
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.clip import one_sided_clip, required_eps
from gmpo_plugins.core.kernels.rowmean import row_masked_mean
from gmpo_plugins.core.kernels.sequence_rows import PassOptions, fused_sequence_rows
from gmpo_plugins.core.kernels.stats import compute_dtype
from gmpo_plugins.core.prepared import clamp_or_nan, per_token_is_gradient, product_guard, sequence_is_weights
from gmpo_plugins.core.reduce import SEQUENCE, as_bool_mask
from gmpo_plugins.core.tail import RowStats, finish, kl_rows
from gmpo_plugins.core.types import BatchInfo, Impl, LossInputs, LossOutput


def sequence_advantages(inputs: LossInputs, dtype: torch.dtype) -> torch.Tensor:
    """(B,) advantages: as given, or the masked row mean of row-constant (B, T) ones."""
    advantages = inputs.advantages.detach()
    if advantages.dim() == 2:
        return row_masked_mean(advantages, inputs.mask, dtype)
    return advantages.to(dtype)


def _policy_log_probs(inputs: LossInputs, aggregation: str, dtype: torch.dtype) -> torch.Tensor:
    """log_probs for the pass: as given, or with the per-token IS gradient scale."""
    weights = inputs.rollout_is_weights
    if aggregation != "per_token" or weights is None or weights.dim() != 2:
        return inputs.log_probs
    return per_token_is_gradient(inputs.log_probs.to(dtype), weights, as_bool_mask(inputs.mask), aggregation)


def _finish(
    inputs: LossInputs,
    batch: BatchInfo,
    values: torch.Tensor,
    coef: torch.Tensor | None,
    stats: RowStats,
    metrics: torch.Tensor | None,
    *,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    loss_name: str,
    is_aggregation: str,
) -> LossOutput:
    """The shared tail (``tail.finish``) with this path's IS weights and KL rows."""
    dtype = values.dtype
    mask = inputs.mask  # as given: the helpers below convert it only where they need it
    rho = sequence_is_weights(inputs.rollout_is_weights, mask, is_aggregation, dtype, mean=row_masked_mean)
    kl = kl_rows(
        inputs, mask, dtype, kl_beta=kl_beta, kl_estimator=kl_estimator, kl_clamp=kl_clamp, loss_name=loss_name
    )
    # the pass reads log_probs, old_log_probs and (B,) advantages: it counts them and poisons its
    # own backward (``sequence_rows``); (B, T) advantages it reads as row means, so the tail counts them
    covered = ("log_probs", "old_log_probs") + (("advantages",) if inputs.advantages.dim() == 1 else ())
    return finish(
        values,
        stats,
        batch,
        inputs=inputs,
        covered=covered,
        reduction=SEQUENCE,
        rho=rho,
        coef=coef,
        kl=kl,
        kl_beta=kl_beta,
        metrics=metrics,
    )


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
    """The GMPO family (``losses/gmpo.eager_geometric_mean_loss``), fused; ``clip`` is
    ``"token"``, ``"sequence"`` or ``"none"``."""
    bound = log_ratio_bound
    low = high = bound
    if clip != "none":
        low, high = required_eps(clip, eps_low, eps_high)  # a missing bound is refused before any work
    token_clip = clip == "token"
    dtype = compute_dtype(inputs.log_probs.dtype)
    advantages = sequence_advantages(inputs, dtype)
    value, stats, metrics, advantages = fused_sequence_rows(
        _policy_log_probs(inputs, rollout_is_aggregation, dtype),
        inputs.old_log_probs,
        inputs.mask,
        advantages,
        PassOptions(
            low=min(low, bound) if token_clip else bound,
            high=min(high, bound) if token_clip else bound,
            bound=bound,
            count_low=token_clip and low < bound,
            count_high=token_clip and high < bound,
            normalise=normalise and clip != "sequence",
            metrics=clip != "sequence",  # seqclip's clipped counts are decided after the pass
            impl=impl,
        ),
    )
    if clip == "sequence":  # the authors' seqclip: clip the sum, then divide by |o_i|
        rows = stats.rows > 0
        value, seq_low, seq_high = one_sided_clip(value, (advantages > 0) & rows, (advantages < 0) & rows, low, high)
        zeros = torch.zeros_like(stats.count)
        stats = stats._replace(
            clipped_low=torch.where(seq_low, stats.count, zeros), clipped_high=torch.where(seq_high, stats.count, zeros)
        )
        if normalise:
            value = value / stats.count.clamp_min(1)
    if not normalise:
        guard = product_guard(inputs.log_probs.dtype)
        value = clamp_or_nan(value, -guard, guard)
    return _finish(
        inputs,
        batch,
        torch.exp(value),
        -advantages,
        stats,
        metrics,
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
    """GSPO (``losses/gspo.eager_gspo_loss``), fused."""
    bound = log_ratio_bound
    dtype = compute_dtype(inputs.log_probs.dtype)
    advantages = sequence_advantages(inputs, dtype)
    value, stats, _, advantages = fused_sequence_rows(
        _policy_log_probs(inputs, rollout_is_aggregation, dtype),
        inputs.old_log_probs,
        inputs.mask,
        advantages,
        PassOptions(
            low=bound,
            high=bound,
            bound=bound,
            count_low=False,
            count_high=False,
            normalise=True,
            metrics=False,  # gspo's clipped counts are decided after the pass
            impl=impl,
        ),
    )
    ratio = torch.exp(value)
    pg = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    zeros = torch.zeros_like(stats.count)
    stats = stats._replace(
        clipped_low=torch.where((advantages < 0) & (ratio < 1.0 - eps_low), stats.count, zeros),
        clipped_high=torch.where((advantages > 0) & (ratio > 1.0 + eps_high), stats.count, zeros),
    )
    return _finish(
        inputs,
        batch,
        pg,
        None,
        stats,
        None,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="gspo",
        is_aggregation=rollout_is_aggregation,
    )
