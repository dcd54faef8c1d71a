"""CISPO (MiniMax-M1, arXiv 2506.13585): REINFORCE with a clipped, stop-gradient IS weight.

Per valid token t, with advantage A_t (a (B,) advantage is broadcast) and rollout IS weight w_t:

    r_t   = exp(clamp(log pi_theta - log pi_old, -R, R))     R = log_ratio_bound (overflow guard)
    c_t   = clamp(r_t, 1 - eps_low, 1 + eps_high)            no lower bound while eps_low is None
    l_t   = -sg(c_t) * A_t * log pi_theta(o_t) * w_t         (+ beta * KL_t)

reduced by ``reduction`` (default ``token-mean``, the paper's and every framework's). The
gradient of token t is ``-c_t * A_t * w_t`` with respect to its log-prob: a clipped token
still learns, with a bounded weight (unlike PPO, where it gets none). Shapes: every tensor
(B, T); ``log_probs`` requires grad.

Conventions. ``eps_high`` is an offset of the ratio (the cap is 1 + eps_high); ``eps_low``
is None by default (no lower clip, as the paper: the weight only needs bounding above).
verl clips r to [1 - clip_ratio_low, 1 + clip_ratio_high] (its PPO bounds, 0.2 each by
default, so a verl run clips both sides unless told otherwise). TRL caps r at
``epsilon_high`` itself with no lower bound (ScaleRL's eps_max, 5.0 recommended): TRL's value
translates as eps_high = epsilon_high - 1. SkyRL clips to [1 - cispo_eps_clip_low,
1 + cispo_eps_clip_high] (SkyRL 0.3: 0.0 and 5.0 by default, a lower bound at 1; SkyRL 0.4:
1.0 and 4.0, no lower bound and the registry's cap of 5). The default
eps_high = 4.0 (a cap of 5) is ScaleRL's (arXiv 2510.13786), as TRL recommends; the MiniMax-M1
paper tunes the cap without giving a value. ``clip_frac_high`` counts tokens with r_t above
the cap, ``clip_frac_low`` those below 1 - eps_low, whatever the sign of A_t.
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.per_token import COMMON_DEFAULTS, COMMON_SOURCES, TOKEN_REDUCTIONS, finish_tokens, token_batch
from gmpo_plugins.core.reduce import TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def cispo_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    eps_low: float | None,
    eps_high: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """CISPO (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    ratio = torch.exp(t.guarded)
    lower = None if eps_low is None else 1.0 - eps_low
    weight = ratio.clamp(min=lower, max=1.0 + eps_high).detach()
    token_loss = -weight * t.advantages * t.log_probs
    low = None if lower is None else (ratio < lower) & t.mask
    return finish_tokens(
        token_loss,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="cispo",
        clipped_low=low,
        clipped_high=(ratio > 1.0 + eps_high) & t.mask,
    )


CISPO = LossSpec(
    name="cispo",
    fn=cispo_loss,
    description="CISPO: -sg(clip(r)) * A * log pi, REINFORCE with a capped IS weight",
    defaults={"eps_low": None, "eps_high": 4.0, "reduction": TOKEN_MEAN, **COMMON_DEFAULTS},
    sources={
        "eps_low": "no lower clip, as the MiniMax-M1 paper (arXiv 2506.13585) and TRL trainer/grpo_trainer.py (cispo)",
        "eps_high": "ScaleRL (arXiv 2510.13786): a cap of 5.0 = 1 + 4.0, as TRL docs/source/paper_index.md sets it",
        "reduction": "MiniMax-M1 paper (arXiv 2506.13585), as TRL, verl and SkyRL: token-mean",
        **COMMON_SOURCES,
    },
    clip_space="ratio",
    reductions=TOKEN_REDUCTIONS,
    formula="l_t = -sg(clamp(r_t, 1 - eps_low, 1 + eps_high)) * A_t * log pi_t",
    native=("verl:cispo", "trl:cispo", "skyrl:cispo", "liger:cispo"),
)
