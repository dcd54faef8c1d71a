"""GSPO (Group Sequence Policy Optimization, arXiv 2507.18071): a sequence-level ratio,
clipped in ratio space.

For sequence i with valid tokens t and sequence advantage A_i:

    s_i = exp(sum_t clamp(r_t, -R, R) / |o_i|)            r_t = log pi_theta - log pi_old
                                                          (NaN for a non-finite r_t: prepared.clamp_or_nan)
    L_i = max(-A_i * s_i, -A_i * clamp(s_i, 1 - eps_low, 1 + eps_high)) * rho_i
          + beta * mean_t KL_t

Defaults eps_low = 3e-4, eps_high = 4e-4 (the GSPO paper's). The micro-batch loss is
``sum_i L_i / N * dp_size``. Where unclipped, each valid token gets gradient
``-A_i * s_i * rho_i / |o_i|``. Unlike GMPO the clip is on the whole sequence: one token
outside the band does not stop the others.

Rollout IS weights (``rollout_is_aggregation``, ``prepared.IS_AGGREGATIONS``): default
``per_token``: the value is L_i * mean_t w_t and token t's gradient is scaled by its own
w_t (``-A_i * s_i * w_t / |o_i|`` where unclipped), as verl's and TRL's GSPO multiply each
token's copy of the sequence surrogate by that token's weight. The IS weight then corrects
each token's own sampling mismatch, which is what a token-level IS weight measures.
"""

from __future__ import annotations

from typing import Any

import torch

from gmpo_plugins.core.kernels import SEQUENCE_IMPLS, check_impl, fused_gspo_loss
from gmpo_plugins.core.per_token import COMMON_SOURCES
from gmpo_plugins.core.prepared import (
    LOG_RATIO_GUARD,
    clamp_or_nan,
    per_token_is_gradient,
    prepare,
    sequence_is_weights,
)
from gmpo_plugins.core.reduce import SEQUENCE
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import eager_row_stats, empty_loss, finish, is_empty, kl_rows
from gmpo_plugins.core.types import BatchInfo, Impl, LossInputs, LossOutput


def gspo_loss(inputs: LossInputs, batch: BatchInfo, *, impl: Impl = "auto", **hparams: Any) -> LossOutput:
    """GSPO: ``impl="eager"`` runs ``eager_gspo_loss`` (the test oracle); "auto" (the
    registry's path), "torch" and "triton" run ``kernels.fused_gspo_loss`` with the same
    keywords, same numbers."""
    check_impl(impl)
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    if impl == "eager":
        return eager_gspo_loss(inputs, batch, **hparams)
    return fused_gspo_loss(inputs, batch, impl=impl, **hparams)


def eager_gspo_loss(
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
) -> LossOutput:
    """Sequence-level clipped ratio (module docstring)."""
    p = prepare(inputs, sequence_level=True)
    r = clamp_or_nan(p.log_ratio, -log_ratio_bound, log_ratio_bound)  # NaN where not finite
    r = per_token_is_gradient(r, p.rollout_is_weights, p.mask, rollout_is_aggregation)
    ratio = torch.exp(r.sum(-1) / p.lengths.clamp_min(1))
    advantages = p.advantages
    pg = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    high = (advantages > 0) & (ratio > 1.0 + eps_high)
    low = (advantages < 0) & (ratio < 1.0 - eps_low)
    dtype = p.log_ratio.dtype
    kl = kl_rows(inputs, p.mask, dtype, kl_beta=kl_beta, kl_estimator=kl_estimator, kl_clamp=kl_clamp, loss_name="gspo")
    return finish(
        pg,
        eager_row_stats(p.log_ratio, p.mask, low[:, None] & p.mask, high[:, None] & p.mask),
        batch,
        inputs=inputs,
        reduction=SEQUENCE,
        rho=sequence_is_weights(inputs.rollout_is_weights, p.mask, rollout_is_aggregation, dtype),
        kl=kl,
        kl_beta=kl_beta,
    )


_EPS_SOURCE = "GSPO paper (arXiv 2507.18071, v2) §5.1, as TRL docs/source/paper_index.md cites it: 3e-4 / 4e-4"

GSPO = LossSpec(
    name="gspo",
    fn=gspo_loss,
    description="GSPO: sequence-level geometric-mean ratio, clipped in ratio space",
    formula="L_i = max(-A_i s_i, -A_i clamp(s_i, 1 - eps_low, 1 + eps_high)),  s_i = exp(mean_t r_t)",
    native=(
        "verl:gspo",
        "trl:importance_sampling_level=sequence",
        "skyrl:gspo",
        "openrlhf:gspo",
        "liger:importance_sampling_level=sequence",
    ),
    defaults={
        "eps_low": 3e-4,
        "eps_high": 4e-4,
        "kl_beta": 0.0,
        "kl_estimator": "k3",
        "kl_clamp": None,
        "log_ratio_bound": LOG_RATIO_GUARD,
        "rollout_is_aggregation": "per_token",
    },
    sources={
        "eps_low": _EPS_SOURCE,
        "eps_high": _EPS_SOURCE,
        **COMMON_SOURCES,
        "rollout_is_aggregation": "verl trainer/ppo/core_algos.py compute_policy_loss_gspo and TRL "
        "trainer/grpo_trainer.py weight each token's copy of the sequence surrogate by its own IS weight",
    },
    sequence_level=True,
    clip_space="ratio",
    impls=SEQUENCE_IMPLS,
)
