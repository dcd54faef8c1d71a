"""VESPO (arXiv 2602.10693): REINFORCE with a detached gamma-shaped weight of the sequence's
importance ratio.

For sequence i with valid tokens t, sequence advantage A_i and rollout IS weights w_t:

    lw_i  = clamp(sum_t clamp(r_t, -R, R) + sum_t clamp(log w_t, ln 1e-8, 20), ln 1e-8, 20)
            r_t = log pi_theta - log pi_old, R = log_ratio_bound; the IS term only with weights
    k, lam = (vespo_k_pos, vespo_lambda_pos) if A_i >= 0 else (vespo_k_neg, vespo_lambda_neg)
    phi_i = exp(lam + k * lw_i - lam * exp(lw_i))     phi(w) = e^lam w^k e^(-lam w), phi(1) = 1
    l_t   = -sg(phi_i) * A_i * log pi_theta(o_t)      (+ beta * KL_t)

reduced by ``reduction`` (default ``token-mean``, TRL's and Liger's for vespo: their global
active-token count). The weight uses the SUM of the token log ratios (the ratio of the whole
sequence), not their mean. Rollout IS weights enter phi in log space and do not multiply
l_t (as TRL and Liger fold ``importance_sampling_ratio`` / ``vllm_is_ratio`` into phi); (B,)
weights add log w_i once per sequence. Token t's gradient is ``-phi_i * A_i`` with respect
to its log-prob. Defaults k_pos = 2, lambda_pos = 3, k_neg = 3, lambda_neg = 2 (TRL's and
Liger's ``vespo_*`` fields). Shapes: every tensor (B, T); one advantage per sequence.

Non-finite values: TRL replaces NaN and +-inf in phi by 0 (``nan_to_num``), which turns a
NaN log-prob into a sequence that silently trains nothing; the registry does not: a
non-finite input at a valid position gives a non-finite loss. For finite inputs phi is
finite (lw_i is clamped; lam + k * lw_i <= lam + 20 k).
"""

from __future__ import annotations

import math

import torch

from gmpo_plugins.core.per_token import (
    COMMON_DEFAULTS,
    COMMON_SOURCES,
    TOKEN_REDUCTIONS,
    TokenBatch,
    finish_tokens,
    token_batch,
)
from gmpo_plugins.core.reduce import TOKEN_MEAN, masked_sum
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction

LOG_WEIGHT_FLOOR = math.log(1e-8)
"""The lower clamp of log w (TRL's and Liger's: the original implementation's 1e-8 floor)."""
LOG_WEIGHT_CEILING = 20.0


def sequence_log_weight(t: TokenBatch, inputs: LossInputs) -> torch.Tensor:
    """lw (B,): the clamped log importance ratio of each sequence, rollout IS weights folded in
    (module docstring); non-finite values pass the clamps."""
    lw = t.guarded.sum(-1)
    weights = inputs.rollout_is_weights
    if weights is not None:
        weights = weights.detach().to(lw.dtype)
        rows = t.mask.any(-1)
        logs = torch.log(torch.where(t.mask if weights.dim() == 2 else rows, weights, 1.0))
        logs = logs.clamp(LOG_WEIGHT_FLOOR, LOG_WEIGHT_CEILING)  # a zero weight: the floor, as TRL
        lw = lw + (masked_sum(logs, t.mask, dim=-1) if weights.dim() == 2 else logs)
    return torch.where(torch.isfinite(lw), lw.clamp(LOG_WEIGHT_FLOOR, LOG_WEIGHT_CEILING), lw)


def vespo_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    vespo_k_pos: float,
    vespo_lambda_pos: float,
    vespo_k_neg: float,
    vespo_lambda_neg: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """VESPO (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound, sequence_level=True)
    with torch.no_grad():
        lw = sequence_log_weight(t, inputs)
        assert t.row_advantages is not None  # sequence_level=True sets it
        nonneg = t.row_advantages >= 0
        k = torch.where(nonneg, torch.full_like(lw, vespo_k_pos), torch.full_like(lw, vespo_k_neg))
        lam = torch.where(nonneg, torch.full_like(lw, vespo_lambda_pos), torch.full_like(lw, vespo_lambda_neg))
        phi = torch.exp(lam + k * lw - lam * torch.exp(lw))[:, None]  # (B, 1)
    return finish_tokens(
        -phi * t.advantages * t.log_probs,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="vespo",
        weigh=False,
    )


VESPO = LossSpec(
    name="vespo",
    fn=vespo_loss,
    description="VESPO: -sg(phi(w_i)) * A * log pi, phi a gamma-shaped weight of the sequence ratio",
    defaults={
        "vespo_k_pos": 2.0,
        "vespo_lambda_pos": 3.0,
        "vespo_k_neg": 3.0,
        "vespo_lambda_neg": 2.0,
        "reduction": TOKEN_MEAN,
        **COMMON_DEFAULTS,
    },
    sources={
        "vespo_k_pos": "TRL trainer/grpo_config.py vespo_k_pos 2.0 (as Liger's)",
        "vespo_lambda_pos": "TRL trainer/grpo_config.py vespo_lambda_pos 3.0 (as Liger's)",
        "vespo_k_neg": "TRL trainer/grpo_config.py vespo_k_neg 3.0 (as Liger's)",
        "vespo_lambda_neg": "TRL trainer/grpo_config.py vespo_lambda_neg 2.0 (as Liger's)",
        "reduction": "TRL trainer/grpo_trainer.py (vespo: the global active-token count), as Liger",
        **COMMON_SOURCES,
    },
    sequence_level=True,
    reductions=TOKEN_REDUCTIONS,
    formula="l_t = -sg(phi_i) * A_i * log pi_t,  phi_i = exp(lam + k lw_i - lam e^lw_i),  lw_i = sum_t log r_t",
    native=("trl:vespo", "liger:vespo"),
)
