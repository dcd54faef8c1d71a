"""The last step shared by the built-in losses: rollout IS weights, batch reduction,
the optional KL term and the metrics."""

from __future__ import annotations

import torch

from gmpo_plugins.core.kl import reference_kl
from gmpo_plugins.core.metrics import ratio_metrics
from gmpo_plugins.core.prepared import PreparedBatch, sequence_is_weights, token_is_weights
from gmpo_plugins.core.reduce import masked_mean, reduce_sequences, reduce_tokens
from gmpo_plugins.core.types import BatchInfo, LossOutput, Reduction


def finish_sequence_loss(
    p: PreparedBatch,
    pg: torch.Tensor,
    batch: BatchInfo,
    *,
    clipped_low: torch.Tensor,
    clipped_high: torch.Tensor,
    kl_beta: float,
    kl_estimator: str,
    loss_name: str,
) -> LossOutput:
    """pg (B,): per-sequence policy-gradient losses. Returns

    loss = reduce_sequences(pg_i * rho_i + beta * mean_t KL_t)
    """
    rho = sequence_is_weights(p)
    if rho is not None:
        pg = pg * rho
    policy_loss = reduce_sequences(pg, p.rows, batch)
    metrics = ratio_metrics(p, clipped_low, clipped_high)
    loss = policy_loss
    kl = reference_kl(p.log_probs, p.ref_log_probs, beta=kl_beta, estimator=kl_estimator, loss_name=loss_name)
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
    kl = reference_kl(p.log_probs, p.ref_log_probs, beta=kl_beta, estimator=kl_estimator, loss_name=loss_name)
    if kl is not None:
        metrics["kl"] = masked_mean(kl, p.mask).detach()
        loss = loss + kl_beta * reduce_tokens(kl, p.mask, batch, reduction, norm_length)
    metrics["policy_loss"] = policy_loss.detach()
    return LossOutput(loss=loss, metrics=metrics)
