"""SkyRL's ``rollout_is``: REINFORCE with a stop-gradient ratio, zeroed outside a band.

Per valid token t, with advantage A_t (a (B,) advantage is broadcast) and rollout IS weight w_t:

    r_t = exp(clamp(log pi_theta - log pi_old, -R, R))      R = log_ratio_bound (overflow guard)
    f_t = r_t  if 1 - eps_low < r_t < 1 + eps_high,  else 0
    l_t = -sg(f_t) * A_t * log pi_theta(o_t) * w_t          (+ beta * KL_t)

reduced by ``reduction`` (default ``token-mean``). The gradient of token t is ``-f_t * A_t * w_t``
with respect to its log-prob: a token outside the band trains nothing (CISPO clamps it
instead). SkyRL takes r against the rollout log-probs: that is this loss with
``rollout_bypass=True`` and ``rollout_log_probs`` (``core.correction``: old := rollout), or with
the rollout log-probs passed as ``old_log_probs``. A NaN or +-inf r_t is never zeroed as out of
band (only a comparison that holds zeroes it), so it makes the loss and gradient non-finite.
``clip_frac_low`` counts tokens with r_t <= 1 - eps_low, ``clip_frac_high`` those with
r_t >= 1 + eps_high, whatever the sign of A_t (SkyRL's ``clip_ratio`` is their sum). Defaults
eps 0.2 / 0.2: SkyRL's ``eps_clip_low`` / ``eps_clip_high``. Shapes: every tensor (B, T).
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.per_token import COMMON_DEFAULTS, COMMON_SOURCES, TOKEN_REDUCTIONS, finish_tokens, token_batch
from gmpo_plugins.core.reduce import TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def rollout_is_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    eps_low: float,
    eps_high: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """SkyRL's rollout_is (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    ratio = torch.exp(t.guarded)
    low = (ratio <= 1.0 - eps_low) & t.mask
    high = (ratio >= 1.0 + eps_high) & t.mask
    weight = torch.where(low | high, 0.0, ratio).detach()
    return finish_tokens(
        -weight * t.advantages * t.log_probs,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="rollout_is",
        clipped_low=low,
        clipped_high=high,
    )


ROLLOUT_IS = LossSpec(
    name="rollout_is",
    fn=rollout_is_loss,
    description="SkyRL rollout_is: -sg(r 1[r in band]) * A * log pi, REINFORCE zeroed outside the band",
    defaults={"eps_low": 0.2, "eps_high": 0.2, "reduction": TOKEN_MEAN, **COMMON_DEFAULTS},
    sources={
        "eps_low": "SkyRL train/config/config.py eps_clip_low 0.2",
        "eps_high": "SkyRL train/config/config.py eps_clip_high 0.2",
        "reduction": "SkyRL train/config/config.py loss_reduction token_mean",
        **COMMON_SOURCES,
    },
    clip_space="ratio",
    reductions=TOKEN_REDUCTIONS,
    formula="l_t = -sg(r_t [1 - eps_low < r_t < 1 + eps_high]) * A_t * log pi_t",
    native=("skyrl:rollout_is",),
)
