"""GPG (Group Policy Gradient, AMAP-ML/GPG, as verl adapts it): plain REINFORCE on the group
advantages.

Per valid token t, with advantage A_t (a (B,) advantage is broadcast) and rollout IS weight w_t:

    l_t = -A_t * log pi_theta(o_t) * w_t                     (+ beta * KL_t)

reduced by ``reduction`` (default ``token-mean``, verl's). No ratio and no clip: GPG's own
corrections (the valid-group rescaling of the advantages) belong to the advantage estimator
(verl's ``gpg`` estimator), not to the loss. ``old_log_probs`` enters only the metrics.
Shapes: every tensor (B, T).
"""

from __future__ import annotations

from gmpo_plugins.core.per_token import COMMON_DEFAULTS, COMMON_SOURCES, TOKEN_REDUCTIONS, finish_tokens, token_batch
from gmpo_plugins.core.reduce import TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def gpg_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """GPG (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    return finish_tokens(
        -t.advantages * t.log_probs,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="gpg",
    )


GPG = LossSpec(
    name="gpg",
    fn=gpg_loss,
    description="GPG: -A * log pi (REINFORCE, no ratio, no clip)",
    defaults={"reduction": TOKEN_MEAN, **COMMON_DEFAULTS},
    sources={"reduction": "verl trainer/config/actor/actor.yaml loss_agg_mode token-mean", **COMMON_SOURCES},
    reductions=TOKEN_REDUCTIONS,
    formula="l_t = -A_t * log pi_t",
    native=("verl:gpg",),
)
