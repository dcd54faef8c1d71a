"""SkyRL's (and Tinker's) ``importance_sampling``: the importance-weighted policy gradient.

Per valid token t, with advantage A_t (a (B,) advantage is broadcast) and rollout IS weight w_t:

    r_t = exp(clamp(log pi_theta - log pi_old, -R, R))      R = log_ratio_bound (overflow guard)
    l_t = -r_t * A_t * w_t                                  (+ beta * KL_t)

reduced by ``reduction`` (default ``token-mean``). No clip: the gradient of token t is
``-r_t * A_t * w_t`` with respect to its log-prob, the REINFORCE gradient weighted by the
full ratio (its value differs from the REINFORCE form -sg(r) A log pi, its gradient not). The
old log-probs are the sampler's (SkyRL passes them as old; with ``rollout_log_probs`` and
``rollout_bypass=True`` the registry anchors the ratio there itself). SkyRL and Tinker sum
the token terms, SkyRL after folding its ``loss_reduction`` into the advantages: the sum of
raw advantages is ``reduction="token-sum"``. Shapes: every tensor (B, T).
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.per_token import COMMON_DEFAULTS, COMMON_SOURCES, TOKEN_REDUCTIONS, finish_tokens, token_batch
from gmpo_plugins.core.reduce import TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def importance_sampling_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """Importance-weighted policy gradient (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    return finish_tokens(
        -torch.exp(t.guarded) * t.advantages,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="importance_sampling",
    )


IMPORTANCE_SAMPLING = LossSpec(
    name="importance_sampling",
    fn=importance_sampling_loss,
    description="SkyRL/Tinker importance_sampling: -r * A, the policy gradient weighted by the ratio",
    defaults={"reduction": TOKEN_MEAN, **COMMON_DEFAULTS},
    sources={"reduction": "SkyRL train/config/config.py loss_reduction token_mean", **COMMON_SOURCES},
    clip_space=None,
    reductions=TOKEN_REDUCTIONS,
    formula="l_t = -r_t * A_t",
    native=("skyrl:importance_sampling",),
)
