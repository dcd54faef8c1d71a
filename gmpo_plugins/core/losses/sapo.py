"""SAPO (Soft Adaptive Policy Optimization, arXiv 2511.20347): a smooth sigmoid gate in place
of PPO's hard clip.

Per valid token t, with advantage A_t (a (B,) advantage is broadcast) and rollout IS weight w_t:

    r_t   = exp(clamp(log pi_theta - log pi_old, -R, R))     R = log_ratio_bound (overflow guard)
    tau_t = tau_pos if A_t > 0 else tau_neg
    f_t   = sigmoid(tau_t * (r_t - 1)) * 4 / tau_t
    l_t   = -f_t * A_t * w_t                                 (+ beta * KL_t)

reduced by ``reduction``, default ``seq-mean-token-mean`` (the paper's, which verl forces
whatever its ``loss_agg_mode``, TRL uses for ``loss_type="sapo"`` and SkyRL recommends); the
others are accepted. The gate's slope at r = 1 is 1, so near the old policy SAPO's gradient
is PPO's, and it decays smoothly, faster for negative advantages (tau_neg > tau_pos).
Defaults tau_pos = 1.0, tau_neg = 1.05 (the paper's, and verl's, TRL's
``sapo_temperature_pos/neg`` and SkyRL's ``sapo.tau_pos/neg``). Shapes: every tensor (B, T).
No token is clipped: the clip fractions are 0.
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.per_token import COMMON_DEFAULTS, COMMON_SOURCES, TOKEN_REDUCTIONS, finish_tokens, token_batch
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def sapo_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    tau_pos: float,
    tau_neg: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """SAPO (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    ratio = torch.exp(t.guarded)
    tau = torch.where(t.advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    return finish_tokens(
        -gate * t.advantages,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="sapo",
    )


SAPO = LossSpec(
    name="sapo",
    fn=sapo_loss,
    description="SAPO: a soft sigmoid gate on the token ratio instead of a hard clip",
    defaults={"tau_pos": 1.0, "tau_neg": 1.05, "reduction": SEQ_MEAN_TOKEN_MEAN, **COMMON_DEFAULTS},
    sources={
        "tau_pos": "SAPO paper (arXiv 2511.20347), as verl actor.yaml tau_pos 1.0 and TRL sapo_temperature_pos 1.0",
        "tau_neg": "SAPO paper (arXiv 2511.20347), as verl actor.yaml tau_neg 1.05 and TRL sapo_temperature_neg 1.05",
        "reduction": "SAPO paper (arXiv 2511.20347), which verl trainer/ppo/core_algos.py forces for sapo",
        **COMMON_SOURCES,
    },
    reductions=TOKEN_REDUCTIONS,
    formula="l_t = -sigmoid(tau_t (r_t - 1)) * 4 / tau_t * A_t,  tau_t = tau_pos if A_t > 0 else tau_neg",
    native=("verl:sapo", "trl:sapo", "skyrl:sapo", "liger:sapo"),
)
