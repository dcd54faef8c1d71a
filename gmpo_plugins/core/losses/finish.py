"""The last step shared by the built-in losses: rollout IS weights, batch reduction,
the optional KL term and the metrics."""

from __future__ import annotations

import torch

from gmpo_plugins.core.kl import reference_kl
from gmpo_plugins.core.metrics import ratio_metrics
from gmpo_plugins.core.prepared import PreparedBatch, sequence_is_weights, token_is_weights
from gmpo_plugins.core.reduce import masked_mean, reduce_sequences, reduce_tokens
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction

METRIC_KEYS = (
    "clip_frac_low",
    "clip_frac_high",
    "clip_frac",
    "ppo_kl",
    "log_ratio_min",
    "log_ratio_max",
    "seq_weight_min",
    "seq_weight_mean",
    "seq_weight_max",
    "policy_loss",
)


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


def finish_sequence_loss(
    p: PreparedBatch,
    pg: torch.Tensor,
    batch: BatchInfo,
    *,
    clipped_low: torch.Tensor,
    clipped_high: torch.Tensor,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None = None,
    loss_name: str,
    is_aggregation: str = "arithmetic_mean",
) -> LossOutput:
    """pg (B,): per-sequence policy-gradient losses. Returns

    loss = reduce_sequences(pg_i * rho_i + beta * mean_t KL_t)

    with rho_i the rollout IS weight of the sequence under ``is_aggregation``
    (``prepared.IS_AGGREGATIONS``; ``per_token``'s gradient scaling is applied by the loss
    to its log ratios, ``prepared.per_token_is_gradient``).
    """
    rho = sequence_is_weights(p, is_aggregation)
    if rho is not None:
        pg = pg * rho
    policy_loss = reduce_sequences(pg, p.rows, batch)
    metrics = ratio_metrics(p, clipped_low, clipped_high)
    loss = policy_loss
    kl = reference_kl(
        p.log_probs, p.ref_log_probs, beta=kl_beta, estimator=kl_estimator, clamp=kl_clamp, loss_name=loss_name
    )
    if kl is not None:
        metrics["kl"] = masked_mean(kl, p.mask).detach()
        loss = loss + kl_beta * reduce_sequences(masked_mean(kl, p.mask, dim=-1), p.rows, batch)
    metrics["policy_loss"] = policy_loss.detach()
    return LossOutput(loss=loss, metrics=metrics)


def finish_token_loss(
    p: PreparedBatch,
    pg: torch.Tensor,
    batch: BatchInfo,
    *,
    reduction: Reduction,
    norm_length: int | None,
    clipped_low: torch.Tensor,
    clipped_high: torch.Tensor,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None = None,
    loss_name: str,
) -> LossOutput:
    """pg (B, T): per-token policy-gradient losses. Returns

    loss = reduce_tokens(pg_t * rho_t + beta * KL_t, reduction)
    """
    rho = token_is_weights(p)
    if rho is not None:
        pg = pg * rho
    policy_loss = reduce_tokens(pg, p.mask, batch, reduction, norm_length)
    metrics = ratio_metrics(p, clipped_low, clipped_high)
    loss = policy_loss
    kl = reference_kl(
        p.log_probs, p.ref_log_probs, beta=kl_beta, estimator=kl_estimator, clamp=kl_clamp, loss_name=loss_name
    )
    if kl is not None:
        metrics["kl"] = masked_mean(kl, p.mask).detach()
        loss = loss + kl_beta * reduce_tokens(kl, p.mask, batch, reduction, norm_length)
    metrics["policy_loss"] = policy_loss.detach()
    return LossOutput(loss=loss, metrics=metrics)
