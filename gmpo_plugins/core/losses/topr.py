"""TOPR (Tapered Off-Policy REINFORCE, arXiv 2503.14286), as ROLL's ``pg_variant="topr"``.

Samples are split by their reward R_i (``LossInputs.rewards`` (B,), the verifier score), not by
the sign of the advantage. Per valid token t of sequence i, with advantage A_t (a (B,)
advantage is broadcast) and rollout IS weight w_t:

    r_t = exp(clamp(log pi_theta - log pi_old, -R, R))       R = log_ratio_bound (overflow guard)
    l_t = -c_pos * A_t * log pi_theta(o_t) * w_t                     if R_i > 0
    l_t = -c_neg * sg(clamp(r_t, 0, 1)) * A_t * log pi_theta(o_t) * w_t   if R_i <= 0
                                                             (+ beta * KL_t)

reduced by ``reduction``. A positive sample is plain REINFORCE (gradient ``-c_pos A_t`` w.r.t.
its log-prob, whatever its ratio); a negative one is tapered: its gradient
``-c_neg min(r_t, 1) A_t`` never exceeds the on-policy one. c_pos = ``topr_positive_weight``,
c_neg = ``topr_negative_weight``.

Source and defaults: ROLL ``roll/pipeline/rlvr/actor_pg_worker.py`` (``_compute_topr_loss``:
``scores > 0`` / ``scores <= 0``, ``clamp(ratio, 0, 1).detach()``, weights read with default
1.0 / 1.0); ``reduction`` defaults to ROLL's ``loss_agg_mode`` default ``seq-mean-token-mean``
(``roll/configs/base_config.py``). ROLL's ratio is per token against ``old_log_probs``;
with ``rollout_bypass=True`` and ``rollout_log_probs`` it is taken against the rollout policy
(mu in the paper). ``clip_frac_high`` counts negative-sample tokens whose ratio was tapered
(r_t > 1; ROLL's ``topr_negative_upper_clipfrac``); ``clip_frac_low`` is 0 (a ratio is never
below 0).

Non-finite values: a NaN or +-inf reward at a valid row is in neither split (both comparisons
fail); the weight adds R_i - R_i (NaN then, 0 otherwise), so that row's loss and gradient are
NaN; a NaN ratio on a
negative sample stays NaN through the clamp. Split invariance: every term reads its own token
and row, so any split with the global counts gives the whole batch's gradient.
Shapes: every tensor (B, T) but ``rewards`` (B,).
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.per_token import COMMON_DEFAULTS, COMMON_SOURCES, TOKEN_REDUCTIONS, finish_tokens, token_batch
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def topr_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    topr_positive_weight: float,
    topr_negative_weight: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """TOPR (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    assert inputs.rewards is not None  # LossSpec.requires
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    rewards = inputs.rewards.detach().to(t.log_ratio.dtype)[:, None]
    positive = (rewards > 0).expand_as(t.mask)
    negative = (rewards <= 0).expand_as(t.mask)
    ratio = torch.exp(t.guarded)
    taper = torch.where(negative, topr_negative_weight * ratio.clamp(0.0, 1.0), 0.0)
    # + (R - R): NaN for a non-finite reward, so that its row's gradient is NaN too
    weight = (torch.where(positive, topr_positive_weight, 0.0) + taper + (rewards - rewards)).detach()
    return finish_tokens(
        -weight * t.advantages * t.log_probs,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="topr",
        clipped_high=negative & (ratio > 1.0) & t.mask,
    )


TOPR = LossSpec(
    name="topr",
    fn=topr_loss,
    description="ROLL topr: REINFORCE on rewarded samples, ratio-tapered (min(r, 1)) on the others",
    defaults={
        "topr_positive_weight": 1.0,
        "topr_negative_weight": 1.0,
        "reduction": SEQ_MEAN_TOKEN_MEAN,
        **COMMON_DEFAULTS,
    },
    sources={
        "topr_positive_weight": "ROLL roll/pipeline/rlvr/actor_pg_worker.py _compute_topr_loss (read with default 1.0)",
        "topr_negative_weight": "ROLL roll/pipeline/rlvr/actor_pg_worker.py _compute_topr_loss (read with default 1.0)",
        "reduction": "ROLL roll/configs/base_config.py loss_agg_mode seq-mean-token-mean",
        **COMMON_SOURCES,
    },
    reductions=TOKEN_REDUCTIONS,
    requires=("rewards",),
    formula="l_t = -A_t * log pi_t * (c_pos [R_i > 0] + c_neg sg(clamp(rho_t, 0, 1)) [R_i <= 0])",
    native=("roll:topr",),
)
