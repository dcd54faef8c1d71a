"""DRO: REINFORCE with a quadratic penalty on the log ratio (verl's ``dro``).

Per valid token t, with advantage A_t (a (B,) advantage is broadcast) and rollout IS weight w_t:

    d_t = clamp(log pi_theta - log pi_old, -R, R)           R = log_ratio_bound (overflow guard)
    l_t = -(A_t * log pi_theta(o_t) - dro_beta / 2 * d_t^2) * w_t     (+ beta * KL_t)

reduced by ``reduction`` (default ``token-mean``, verl's). The gradient of token t is
``(-A_t + dro_beta * d_t) * w_t``: the penalty pulls the policy back to the old one, on every
token, also where A_t = 0. A token with |d_t| > R gets no gradient from the penalty (verl
does not clamp; R = 20 is a log ratio of e^20). ``dro_beta`` has no paper default and verl
requires it (``policy_loss.dro_beta``, null by default); the registry's 0.1 is a starting
point, set it for your run. Shapes: every tensor (B, T). The penalty is not linear in the
advantages: a framework that normalises by pre-scaling the advantages cannot express it.
"""

from __future__ import annotations

from gmpo_plugins.core.per_token import COMMON_DEFAULTS, COMMON_SOURCES, TOKEN_REDUCTIONS, finish_tokens, token_batch
from gmpo_plugins.core.reduce import TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def dro_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    dro_beta: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """DRO (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    token_loss = -(t.advantages * t.log_probs - 0.5 * dro_beta * t.guarded.square())
    return finish_tokens(
        token_loss,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="dro",
    )


DRO = LossSpec(
    name="dro",
    fn=dro_loss,
    description="DRO: -(A * log pi - dro_beta / 2 * (log r)^2)",
    defaults={"dro_beta": 0.1, "reduction": TOKEN_MEAN, **COMMON_DEFAULTS},
    sources={
        "dro_beta": "no paper or framework default (verl actor.yaml policy_loss.dro_beta null, required): the "
        "registry's starting point, set it for your run",
        "reduction": "verl trainer/config/actor/actor.yaml loss_agg_mode token-mean",
        **COMMON_SOURCES,
    },
    reductions=TOKEN_REDUCTIONS,
    linear_in_advantages=False,
    formula="l_t = -(A_t * log pi_t - dro_beta / 2 * (log r_t)^2)",
    native=("verl:dro",),
)
