"""The loss tail every built-in loss ends with, on the eager and the fused path alike.

After its (B, T) work a loss has, per row i (sequence), a differentiable value v_i and the
row's statistics (``RowStats``). Everything after that is written here once:

    policy_loss = sum_i u_i * rho_i * c_i * v_i                  (``finish``)

    u_i    the batch reduction as weights of the rows (``reduce.row_weights``): v_i is a
           per-sequence loss L_i under ``SEQUENCE``, a row's sum of token losses S_i under
           the token reductions (token-mean, seq-mean-token-mean, seq-mean-token-sum-norm)
    rho_i  the row's rollout IS weight (``prepared.sequence_is_weights``), sequence-level
           losses (token-level ones weight each token inside S_i)
    c_i    a per-row constant factor of the value (the GMPO family passes v_i = w_i and
           c_i = -A_i, so that v_i stays the differentiable geometric mean)

    loss   = policy_loss + beta * sum_i u'_i * K_i,  K_i = sum_t m_t KL_t (``kl_rows``), u' the
             weights of the loss's token reduction (seq-mean-token-mean for sequence-level ones)

The non-finite rule (``prepared``'s module docstring) is applied here too, once for every
loss: ``policy_loss`` gets the term n (-0, or NaN when a valid position of an input is NaN or
+-inf; its gradient with respect to every log-prob is n) and ``nonfinite_tokens`` the count of
such positions, for every input the caller's pass has not already handled (``covered``).

The metrics come from ``RowStats`` as one stacked vector (``metric_vector``), which the
metrics dict views, so the fused paths compute them in a few ops (or inside their custom
operator) and the eager path in the same way from its (B, T) tensors (``eager_row_stats``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gmpo_plugins.core.kl import reference_kl
from gmpo_plugins.core.prepared import (
    LOG_RATIO_GUARD,
    clamp_or_nan,
    input_tensors,
    nonfinite_sentinel,
    nonfinite_term,
)
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, SEQUENCE, as_bool_mask, masked_sum, row_weights
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction

RATIO_METRIC_KEYS = (
    "clip_frac_low",
    "clip_frac_high",
    "clip_frac",
    "ppo_kl",
    "log_ratio_min",
    "log_ratio_max",
    "seq_weight_min",
    "seq_weight_mean",
    "seq_weight_max",
    "nonfinite_tokens",
)
"""The entries of ``metric_vector``, in order. Every built-in loss reports them with one
meaning; all are detached 0-dim tensors over the valid tokens of the micro-batch, and none
forces a host-device synchronisation:

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
    nonfinite_tokens valid positions where any input (log-prob, old log-prob, advantage,
                     reference log-prob, IS weight; a (B,) one at every valid position of
                     its row) is NaN or +-inf, -inf included; the loss and its gradient are
                     then non-finite (``prepared``'s rule)

Non-finite values are reported as they are (a NaN log ratio makes ``ppo_kl``,
``log_ratio_min/max`` and ``seq_weight_*`` NaN; a token whose ratio is NaN counts as
clipped on neither side). The extrema of a micro-batch without a valid token are 0.
"""
METRIC_KEYS = (*RATIO_METRIC_KEYS, "policy_loss")


class RowStats(NamedTuple):
    """Per-row statistics of the raw log ratio r_t over the valid tokens, all (B,) float.

    count         valid tokens |o_i|
    rows          1.0 where |o_i| > 0, else 0.0
    sum_raw       sum_t m_t * r_t
    raw_min       min of r_t over valid tokens (+inf for an empty row)
    raw_max       max of r_t over valid tokens (-inf for an empty row)
    clipped_low   valid tokens whose clipped value was chosen on the low side
    clipped_high  the same on the high side
    nonfinite     valid positions where any input is NaN or +-inf (``prepared``'s rule); None
                  until ``finish`` counts it (a fused pass counts it itself)
    """

    count: torch.Tensor  # type: ignore[assignment]  # a public field: hides tuple.count on purpose
    rows: torch.Tensor
    sum_raw: torch.Tensor
    raw_min: torch.Tensor
    raw_max: torch.Tensor
    clipped_low: torch.Tensor
    clipped_high: torch.Tensor
    nonfinite: torch.Tensor | None = None


ROW_STATS = len(RowStats._fields)


def eager_row_stats(
    log_ratio: torch.Tensor, mask: torch.Tensor, clipped_low: torch.Tensor, clipped_high: torch.Tensor
) -> RowStats:
    """``RowStats`` from (B, T) tensors: the log ratio (0 on padding, raw: not guarded, so
    that a non-finite r_t is reported as it is), the bool mask, and the bool tokens whose
    clipped value was chosen (only valid ones are counted); ``nonfinite`` is left to
    ``finish``, which counts every input."""
    with torch.no_grad():
        r = log_ratio.detach()
        inf = torch.full((), torch.inf, dtype=r.dtype, device=r.device)
        count = mask.sum(-1).to(r.dtype)
        return RowStats(
            count=count,
            rows=(count > 0).to(r.dtype),
            sum_raw=masked_sum(r, mask, dim=-1),
            raw_min=torch.where(mask, r, inf).amin(-1),
            raw_max=torch.where(mask, r, -inf).amax(-1),
            clipped_low=(clipped_low & mask).sum(-1).to(r.dtype),
            clipped_high=(clipped_high & mask).sum(-1).to(r.dtype),
        )


def metric_vector(stats: RowStats) -> torch.Tensor:
    """The shared metrics (``RATIO_METRIC_KEYS``) of one micro-batch as one (10,) tensor.

    With n = sum_i |o_i| (at least 1): clip fractions sum_i clipped_i / n, ppo_kl
    -sum_i sum_raw_i / n, the range of r over valid tokens, min / mean / max of the
    per-sequence geometric-mean ratio exp(clamp_or_nan(sum_raw_i / |o_i|, -20, 20)) over
    non-empty rows, and sum_i nonfinite_i. Non-finite values stay as they are; the extrema of
    a micro-batch without a valid token are 0, chosen by ``torch.where`` on n (no sync).
    B >= 1 (an empty batch is ``empty_loss``'s); ``stats.nonfinite`` counted (``finish``).
    """
    if stats.nonfinite is None:
        raise ValueError("stats.nonfinite: expected the per-row count of non-finite positions, got None")
    with torch.no_grad():
        sums = torch.stack(
            (stats.count, stats.rows, stats.sum_raw, stats.clipped_low, stats.clipped_high, stats.nonfinite)
        ).sum(-1)
        kl, low, high = sums[2:5] / sums[0].clamp_min(1)
        mean_ratio = stats.sum_raw / stats.count.clamp_min(1)
        seq_weight = clamp_or_nan(mean_ratio, -LOG_RATIO_GUARD, LOG_RATIO_GUARD).exp_()
        rows = stats.rows > 0
        extrema = torch.stack(
            (
                stats.raw_min.amin(),
                stats.raw_max.amax(),
                torch.where(rows, seq_weight, torch.inf).amin(),
                torch.where(rows, seq_weight, -torch.inf).amax(),
            )
        )
        extrema = torch.where(sums[0] > 0, extrema, 0.0)  # +-inf over nothing: a batch without a valid token
        seq_weight_mean = torch.dot(seq_weight, stats.rows) / sums[1].clamp_min(1)  # empty rows: 0 * e^0
        return torch.stack(
            (low, high, low + high, -kl, extrema[0], extrema[1], extrema[2], seq_weight_mean, extrema[3], sums[5])
        )


def kl_rows(
    inputs: LossInputs,
    mask: torch.Tensor,
    dtype: torch.dtype,
    *,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    loss_name: str,
) -> torch.Tensor | None:
    """K (B,): the per-token KL to the reference policy (``core/kl.py``) summed over each
    row's valid tokens (``mask``, bool or 0/1), differentiable; None without ``ref_log_probs``.

    Raises ValueError when ``kl_beta > 0`` and ``ref_log_probs`` is missing.
    """
    ref = None if inputs.ref_log_probs is None else inputs.ref_log_probs.detach().to(dtype)
    log_probs = inputs.log_probs if ref is None else inputs.log_probs.to(dtype)  # no copy without a KL term
    kl = reference_kl(
        log_probs, ref, as_bool_mask(mask), beta=kl_beta, estimator=kl_estimator, clamp=kl_clamp, loss_name=loss_name
    )
    return None if kl is None else kl.sum(-1)  # 0 at padding


def finish(
    values: torch.Tensor,
    stats: RowStats,
    batch: BatchInfo,
    *,
    inputs: LossInputs,
    covered: tuple[str, ...] = (),
    reduction: Reduction | str,
    norm_length: int | None = None,
    rho: torch.Tensor | None = None,
    coef: torch.Tensor | None = None,
    kl: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    metrics: torch.Tensor | None = None,
    extra: dict[str, torch.Tensor] | None = None,
) -> LossOutput:
    """The ``LossOutput`` of a loss from its row values (B,) (module docstring).

    ``rho`` and ``coef`` (B,) multiply the values (None: 1), ``kl`` (B,) holds the rows' KL
    sums (``kl_rows``), ``metrics`` the ``metric_vector`` when the caller has it already,
    ``extra`` further metrics (e.g. ``clip_frac_dual``).

    ``inputs`` the loss's inputs and ``covered`` the names of those whose non-finite values
    the caller's pass has already handled (counted in ``stats.nonfinite`` and made a
    non-finite loss and gradient): for any other input the non-finite rule is applied here
    (module docstring), and ``stats.nonfinite`` recounted over all inputs.

    ``values``, ``rho`` and ``coef`` must be finite on rows without a valid token, whose
    weight u_i is 0 (0 * NaN would be NaN): the callers zero the per-row inputs there before
    anything is computed from them (``prepare``, ``sequence_rows``, ``sequence_is_weights``),
    at no cost to the fused path's operator count.
    """
    weights = row_weights(stats.count, stats.rows, batch, reduction, norm_length)
    if rho is not None:
        weights = weights * rho
    if coef is not None:
        weights = weights * coef
    policy_loss = torch.dot(values, weights)
    if any(name not in covered for name in input_tensors(inputs)):
        sentinel = nonfinite_sentinel(inputs, as_bool_mask(inputs.mask), values.dtype)
        policy_loss = policy_loss + nonfinite_term(inputs.log_probs, sentinel)
        stats, metrics = stats._replace(nonfinite=torch.isnan(sentinel).sum(-1).to(values.dtype)), None
    vector = metric_vector(stats) if metrics is None else metrics
    out = dict(zip(RATIO_METRIC_KEYS, vector.unbind(0), strict=True))
    out.update(extra or {})
    loss = policy_loss
    if kl is not None:
        kl_reduction = SEQ_MEAN_TOKEN_MEAN if reduction == SEQUENCE else reduction
        kl_weights = row_weights(stats.count, stats.rows, batch, kl_reduction, norm_length)
        out["kl"] = (kl.detach().sum() / stats.count.sum().clamp_min(1)).detach()
        loss = loss + kl_beta * torch.dot(kl, kl_weights)
    out["policy_loss"] = policy_loss.detach()
    return LossOutput(loss=loss, metrics=out)


def is_empty(inputs: LossInputs) -> bool:
    """True for a micro-batch without any position (B = 0 or T = 0); a shape test, no sync."""
    return inputs.log_probs.numel() == 0


def empty_loss(inputs: LossInputs, *, kl: bool = False, dual_clip: bool = False) -> LossOutput:
    """The result for an empty micro-batch (B = 0 or T = 0, which frameworks produce on padding
    ranks or with dynamic batch sizes): a zero loss connected to the graph of ``log_probs``
    (its gradient is a zero (B, T) tensor) and every metric 0."""
    log_probs = inputs.log_probs
    loss = log_probs.sum().to(torch.promote_types(log_probs.dtype, torch.float32)) * 0.0
    zero = torch.zeros((), dtype=loss.dtype, device=loss.device)
    keys = (
        METRIC_KEYS
        + (("kl",) if kl and inputs.ref_log_probs is not None else ())
        + (("clip_frac_dual",) if dual_clip else ())
    )
    return LossOutput(loss=loss, metrics={key: zero.clone() for key in keys})
