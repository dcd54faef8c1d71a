"""DPPO (Divergence PPO, arXiv 2602.04879), binary variants: PPO's ratio clip replaced by a
trust region on the divergence between the two token distributions, applied as a 0/1 mask.

Per valid token t, with advantage A_t (a (B,) advantage is broadcast), rollout IS weight w_t,
p_t = pi_theta(o_t) and q_t = pi_old(o_t) (probabilities of the sampled token):

    r_t   = exp(clamp(log p_t - log q_t, -R, R))                R = log_ratio_bound
    dppo_tv   M_t = [p_t - q_t <= delta_high]          if A_t > 0
                    [p_t - q_t >= -delta_low]          otherwise
    dppo_kl   D_t = q_t (log q_t - log p_t) + (1 - q_t) log((1 - q_t + 1e-8) / (1 - p_t + 1e-8))
              M_t = [D_t <= delta_high or p_t <= q_t]  if A_t > 0
                    [D_t <= delta_low or p_t >= q_t]   otherwise
    l_t   = -A_t * sg(min(r_t, ratio_cap)) * log p_t * M_t * w_t        (+ beta * KL_t)

reduced by ``reduction`` (default ``token-mean``, verl's). The mask is computed without
gradient. A kept token's gradient is ``-A_t * min(r_t, ratio_cap) * w_t`` with respect to its
log-prob (the gradient of -A_t r_t), a masked token's is 0: outside the trust region a token
only stops pushing further out, as in PPO, but the region is measured in probability mass,
so rare tokens can move their ratio far without being clipped. Shapes: every tensor (B, T).

Conventions. The behaviour policy is ``old_log_probs`` as given (verl: the old policy;
SkyRL: its rollout log-probs when it has them, which its adapter then passes as
``old_log_probs``). Thresholds ``delta_low`` (A_t <= 0) and ``delta_high`` (A_t > 0): verl
reads them from ``clip_ratio_low`` / ``clip_ratio_high`` (its PPO bounds reused as
divergences), SkyRL from ``dppo.delta_low`` / ``dppo.delta_high``. Defaults 0.15 for TV and
0.05 for KL: the paper's authors' recipe (verl ``examples/dppo_trainer/run_qwen30b_dppo.sh``,
the Qwen3-30B-A3B-Base run of the paper's figures); SkyRL's config defaults to 0.2 for both and
recommends 0.2 for TV, 0.05 for KL. ``ratio_cap`` truncates the
stop-gradient weight (verl's ``clip_ratio_c``, 3.0 in verl's actor config; SkyRL has none);
None (the default) leaves it untruncated. The loss value is verl's REINFORCE form
(-A sg(r) log p); SkyRL's value is -A r M, with the same gradient. ``clip_frac_high`` counts
masked tokens with A_t > 0, ``clip_frac_low`` those with A_t < 0.
"""

from __future__ import annotations

from typing import Literal

import torch

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

Divergence = Literal["tv", "kl"]


def trust_region_mask(
    t: TokenBatch, inputs: LossInputs, divergence: Divergence, delta_low: float, delta_high: float
) -> torch.Tensor:
    """M (B, T) bool: the tokens inside DPPO's trust region (module docstring), False at padding."""
    with torch.no_grad():
        dtype = t.log_ratio.dtype
        old = torch.where(t.mask, inputs.old_log_probs.detach().to(dtype), 0.0)
        p, q = t.log_probs.detach().exp(), old.exp()
        positive = t.advantages > 0
        if divergence == "tv":
            keep = torch.where(positive, p - q <= delta_high, p - q >= -delta_low)
        else:
            d = q * (old - t.log_probs.detach()) + (1 - q) * torch.log((1 - q + 1e-8) / (1 - p + 1e-8))
            keep = torch.where(positive, (d <= delta_high) | (p <= q), (d <= delta_low) | (p >= q))
        return keep & t.mask


def dppo_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    divergence: Divergence,
    delta_low: float,
    delta_high: float,
    ratio_cap: float | None,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """DPPO-Binary-TV or -KL (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    keep = trust_region_mask(t, inputs, divergence, delta_low, delta_high)
    ratio = torch.exp(t.guarded).detach()
    weight = ratio if ratio_cap is None else ratio.clamp(max=ratio_cap)
    token_loss = torch.where(keep, -t.advantages * weight * t.log_probs, 0.0)
    dropped = t.mask & ~keep
    return finish_tokens(
        token_loss,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name=f"dppo_{divergence}",
        clipped_low=dropped & (t.advantages < 0),
        clipped_high=dropped & (t.advantages > 0),
    )


def dppo_tv_loss(inputs: LossInputs, batch: BatchInfo, **hparams: object) -> LossOutput:
    """DPPO-Binary-TV: the trust region |p - q| per side (module docstring)."""
    return dppo_loss(inputs, batch, divergence="tv", **hparams)  # type: ignore[arg-type]


def dppo_kl_loss(inputs: LossInputs, batch: BatchInfo, **hparams: object) -> LossOutput:
    """DPPO-Binary-KL: the trust region on the binary KL of the sampled token (module docstring)."""
    return dppo_loss(inputs, batch, divergence="kl", **hparams)  # type: ignore[arg-type]


def _defaults(delta: float) -> dict[str, object]:
    return {"delta_low": delta, "delta_high": delta, "ratio_cap": None, "reduction": TOKEN_MEAN, **COMMON_DEFAULTS}


def _sources(delta: float) -> dict[str, str]:
    recipe = f"the DPPO authors' recipe (arXiv 2602.04879), verl examples/dppo_trainer/run_qwen30b_dppo.sh: {delta}"
    return {
        "delta_low": recipe,
        "delta_high": recipe,
        "ratio_cap": "None, as SkyRL backends/skyrl_train/utils/ppo_utils.py (no truncation); verl truncates at "
        "clip_ratio_c 3.0 (actor.yaml): ratio_cap=3 for it",
        "reduction": "verl trainer/config/actor/actor.yaml loss_agg_mode token-mean",
        **COMMON_SOURCES,
    }


DPPO_TV = LossSpec(
    name="dppo_tv",
    fn=dppo_tv_loss,
    description="DPPO-Binary-TV: REINFORCE masked outside a total-variation trust region",
    defaults=_defaults(0.15),
    sources=_sources(0.15),
    reductions=TOKEN_REDUCTIONS,
    formula="l_t = -A_t sg(min(r_t, ratio_cap)) log pi_t * [p_t - q_t <= delta_high if A_t > 0 else >= -delta_low]",
    native=("verl:dppo_tv", "skyrl:dppo (binary_tv)"),
)
DPPO_KL = LossSpec(
    name="dppo_kl",
    fn=dppo_kl_loss,
    description="DPPO-Binary-KL: REINFORCE masked outside a binary-KL trust region",
    defaults=_defaults(0.05),
    sources=_sources(0.05),
    reductions=TOKEN_REDUCTIONS,
    formula="l_t = -A_t sg(min(r_t, ratio_cap)) log pi_t * [D_t <= delta_high or p_t <= q_t if A_t > 0 else ...]",
    native=("verl:dppo_kl", "skyrl:dppo (binary_kl)"),
)
