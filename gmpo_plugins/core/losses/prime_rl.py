"""prime-rl's two RL losses: ``default`` (DPPO-Binary-TV plus a squared-log-ratio KL) and ``ipo``
(a symmetric probability trust region plus the same KL).

Per valid token t, with advantage A_t (a (B,) advantage is broadcast), rollout IS weight w_t,
p_t = pi_theta(o_t), q_t = pi_old(o_t):

    r_t  = exp(clamp(log p_t - log q_t, -R, R))            R = log_ratio_bound (overflow guard)
    prime_rl   M_t = [p_t - q_t <= delta_high]  if A_t > 0,  [p_t - q_t >= -delta_low]  otherwise
               (``dppo_tv``'s trust region, ``dppo.trust_region_mask``)
    prime_ipo  M_t = [|p_t - q_t| <= ipo_threshold]
    l_t  = (-adv_tau * A_t * r_t * M_t + kl_tau * (log r_t)^2) * w_t        (+ beta * KL_t)

reduced by ``reduction`` (default ``token-mean``: prime-rl divides the summed token losses by
the global count of RL tokens). The KL term reads every valid token, masked or not; its
gradient is ``2 kl_tau log r_t`` w.r.t. the log-prob, the policy term's ``-adv_tau A_t r_t M_t``
(the mask is computed without gradient). The value is prime-rl's (-A r, not dppo_tv's
REINFORCE form -A sg(r) log p; same gradient).

The ratio is taken against the inference log-probs: prime-rl has no other old policy, so pass
them as ``old_log_probs``, or pass ``rollout_log_probs`` with ``rollout_bypass=True``
(``core.correction``). ``prime_rl`` is dppo_tv anchored at the rollout policy plus the
(log r)^2 term; it is a module of its own because that term is not among the shared ones.

Source and defaults: prime-rl ``src/prime_rl/trainer/rl/loss.py`` (``default_loss_fn``,
``ipo_loss_fn``) and ``packages/prime-rl-configs/src/prime_rl/configs/trainer.py``
(``DefaultLossConfig``: dppo_mask_low 0.2, dppo_mask_high 0.2, adv_tau 1.0, kl_tau 1e-3;
``IPOLossConfig``: ipo_threshold 0.1, adv_tau 1.0, kl_tau 1e-3). ``clip_frac_low`` /
``clip_frac_high`` count masked tokens with A_t < 0 / A_t > 0 (prime-rl's ``is_masked_low`` /
``is_masked_high``; for ipo every masked token by the sign of its advantage).

Non-finite values: a NaN or +-inf ratio fails every comparison (the token is masked) but its
KL term reads the unguarded log ratio, so the loss and its gradient are non-finite. Not linear in the advantages
(the KL term is not scaled with them). Split-invariant: every term reads its own token.
Shapes: every tensor (B, T).
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.losses.dppo import trust_region_mask
from gmpo_plugins.core.per_token import (
    COMMON_DEFAULTS,
    COMMON_SOURCES,
    TOKEN_REDUCTIONS,
    TokenBatch,
    finish_tokens,
    token_batch,
)
from gmpo_plugins.core.reduce import TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def _loss(
    t: TokenBatch,
    keep: torch.Tensor,
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    adv_tau: float,
    kl_tau: float,
    loss_name: str,
    **shared: object,
) -> LossOutput:
    """prime-rl's per-token loss given the trust-region mask ``keep`` (B, T) bool (module docstring)."""
    pg = torch.where(keep, -adv_tau * t.advantages * torch.exp(t.guarded), 0.0)
    log_ratio = torch.where(t.mask, t.log_ratio, 0.0)  # raw: a square needs no overflow guard
    dropped = t.mask & ~keep
    return finish_tokens(
        pg + kl_tau * log_ratio.square(),
        t,
        inputs,
        batch,
        loss_name=loss_name,
        clipped_low=dropped & (t.advantages < 0),
        clipped_high=dropped & (t.advantages > 0),
        **shared,  # type: ignore[arg-type]
    )


def prime_rl_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    delta_low: float,
    delta_high: float,
    adv_tau: float,
    kl_tau: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """prime-rl's ``default`` loss (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    keep = trust_region_mask(t, inputs, "tv", delta_low, delta_high)
    shared = {"reduction": reduction, "kl_beta": kl_beta, "kl_estimator": kl_estimator, "kl_clamp": kl_clamp}
    return _loss(t, keep, inputs, batch, adv_tau=adv_tau, kl_tau=kl_tau, loss_name="prime_rl", **shared)


def prime_ipo_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    ipo_threshold: float,
    adv_tau: float,
    kl_tau: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """prime-rl's ``ipo`` loss (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    with torch.no_grad():
        old = torch.where(t.mask, inputs.old_log_probs.detach().to(t.log_ratio.dtype), 0.0)
        keep = ((t.log_probs.detach().exp() - old.exp()).abs() <= ipo_threshold) & t.mask
    shared = {"reduction": reduction, "kl_beta": kl_beta, "kl_estimator": kl_estimator, "kl_clamp": kl_clamp}
    return _loss(t, keep, inputs, batch, adv_tau=adv_tau, kl_tau=kl_tau, loss_name="prime_ipo", **shared)


_SHARED = {"adv_tau": 1.0, "kl_tau": 1e-3, "reduction": TOKEN_MEAN, **COMMON_DEFAULTS}
_CONFIGS = "prime-rl packages/prime-rl-configs/src/prime_rl/configs/trainer.py"
_SHARED_SOURCES = {
    "adv_tau": f"{_CONFIGS} adv_tau 1.0",
    "kl_tau": f"{_CONFIGS} kl_tau 1e-3",
    "reduction": "prime-rl src/prime_rl/trainer/rl/loss.py: the summed token losses over the token count",
    **COMMON_SOURCES,
}

PRIME_RL = LossSpec(
    name="prime_rl",
    fn=prime_rl_loss,
    description="prime-rl default: DPPO-Binary-TV (-A r, masked) plus kl_tau (log r)^2 on every token",
    defaults={"delta_low": 0.2, "delta_high": 0.2, **_SHARED},
    sources={
        "delta_low": f"{_CONFIGS} DefaultLossConfig dppo_mask_low 0.2",
        "delta_high": f"{_CONFIGS} DefaultLossConfig dppo_mask_high 0.2",
        **_SHARED_SOURCES,
    },
    reductions=TOKEN_REDUCTIONS,
    linear_in_advantages=False,
    formula="l_t = -adv_tau A_t r_t [dppo_tv's trust region] + kl_tau (log r_t)^2",
    native=("prime-rl:default",),
)
PRIME_IPO = LossSpec(
    name="prime_ipo",
    fn=prime_ipo_loss,
    description="prime-rl ipo: -A r masked where |p - q| > ipo_threshold, plus kl_tau (log r)^2",
    defaults={"ipo_threshold": 0.1, **_SHARED},
    sources={"ipo_threshold": f"{_CONFIGS} IPOLossConfig ipo_threshold 0.1", **_SHARED_SOURCES},
    reductions=TOKEN_REDUCTIONS,
    linear_in_advantages=False,
    formula="l_t = -adv_tau A_t r_t [|p_t - q_t| <= ipo_threshold] + kl_tau (log r_t)^2",
    native=("prime-rl:ipo",),
)
