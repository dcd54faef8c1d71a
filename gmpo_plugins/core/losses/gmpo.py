"""GMPO (Geometric-Mean Policy Optimization, arXiv 2507.20673) and the paper's ablations.

For sequence i with valid tokens t (|o_i| of them) and sequence advantage A_i:

    r_t = clamp(log pi_theta - log pi_old, -R, R)       R = log_ratio_bound (overflow guard)
    l_t = min(r_t, eps_high)  if A_i > 0                one-sided log-space clip, per token
          max(r_t, -eps_low)  if A_i < 0
    s_i = sum_t l_t / |o_i|                             geometric mean in log space
    w_i = exp(s_i)
    L_i = -A_i * w_i * rho_i + beta * mean_t KL_t       rho_i: rollout IS weight of the sequence

A clipped token gets zero gradient; every other valid token of sequence i gets
``dL_i/dlog_prob_t = -A_i * w_i * rho_i / |o_i|``. The micro-batch loss is
``sum_i L_i / N * dp_size`` (``reduce_sequences``), so accumulation over micro-batches
and averaging over data-parallel ranks reproduce the whole-batch mean exactly.

Guard: R = 20 keeps w_i <= e^20 for any finite input. Tokens with |r_t| > R get zero
gradient, on either side; with the default eps this changes the loss only where the
unclipped side is unbounded (A_i < 0 and r_t > R), or for A_i > 0 tokens whose ratio
is below e^-20, and in gmpo_noclip wherever |r_t| > R.

Ablations (paper Table 3): ``gmpo_noclip`` (l_t = r_t), ``gmpo_seqclip`` (the one-sided
clip applied to s_i instead of each token), ``gmpo_nonorm`` (s_i = sum_t l_t without
1/|o_i|, clamped to +-R: the product of the token ratios).
"""

from __future__ import annotations

from typing import Optional

import torch

from gmpo_plugins.core.clip import one_sided_clip, required_eps
from gmpo_plugins.core.kernels import check_impl, fused_geometric_mean_loss
from gmpo_plugins.core.losses.finish import finish_sequence_loss
from gmpo_plugins.core.prepared import LOG_RATIO_GUARD, prepare
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import BatchInfo, Clip, Impl, LossInputs, LossOutput

_KL_DEFAULTS = {"kl_beta": 0.0, "kl_estimator": "k3"}
_GUARD_DEFAULT = {"log_ratio_bound": LOG_RATIO_GUARD}
_EPS_DEFAULTS = {"eps_low": 0.4, "eps_high": 0.4}


def geometric_mean_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    clip: Clip,
    normalise: bool,
    kl_beta: float,
    kl_estimator: str,
    log_ratio_bound: float,
    eps_low: Optional[float] = None,
    eps_high: Optional[float] = None,
    loss_name: str = "gmpo",
    impl: Impl = "auto",
) -> LossOutput:
    """The GMPO family in one place; ``clip`` is ``"token"``, ``"sequence"`` or ``"none"``.

    ``impl="eager"`` runs the formulation below (the test oracle); "auto" (the registry's
    path), "torch" and "triton" run ``kernels.fused_geometric_mean_loss``, same numbers.
    """
    check_impl(impl)
    if impl != "eager":
        return fused_geometric_mean_loss(
            inputs,
            batch,
            clip=clip,
            normalise=normalise,
            kl_beta=kl_beta,
            kl_estimator=kl_estimator,
            log_ratio_bound=log_ratio_bound,
            eps_low=eps_low,
            eps_high=eps_high,
            loss_name=loss_name,
            impl=impl,
        )
    p = prepare(inputs, sequence_level=True)
    mask = p.mask
    bound = log_ratio_bound
    r = p.log_ratio.clamp(-bound, bound)
    positive = p.advantages > 0  # (B,)
    negative = p.advantages < 0
    no_clip = torch.zeros_like(mask)
    clipped_low = clipped_high = no_clip

    if clip == "token":
        eps = required_eps(clip, eps_low, eps_high)
        r, clipped_low, clipped_high = one_sided_clip(r, positive[:, None] & mask, negative[:, None] & mask, *eps)
    summed = r.sum(-1)  # padding holds 0
    s = summed / p.lengths.clamp_min(1) if normalise else summed.clamp(-bound, bound)
    if clip == "sequence":
        eps = required_eps(clip, eps_low, eps_high)
        s, seq_low, seq_high = one_sided_clip(s, positive & p.rows, negative & p.rows, *eps)
        clipped_low, clipped_high = seq_low[:, None] & mask, seq_high[:, None] & mask

    pg = -p.advantages * torch.exp(s)
    return finish_sequence_loss(
        p,
        pg,
        batch,
        clipped_low=clipped_low,
        clipped_high=clipped_high,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        loss_name=loss_name,
    )


def gmpo_loss(inputs: LossInputs, batch: BatchInfo, **hparams) -> LossOutput:
    """GMPO: token-level log-space clip, geometric mean with 1/|o_i| (module docstring)."""
    return geometric_mean_loss(inputs, batch, clip="token", normalise=True, loss_name="gmpo", **hparams)


def gmpo_noclip_loss(inputs: LossInputs, batch: BatchInfo, **hparams) -> LossOutput:
    """GMPO without clipping: w_i = exp(mean_t r_t)."""
    return geometric_mean_loss(inputs, batch, clip="none", normalise=True, loss_name="gmpo_noclip", **hparams)


def gmpo_seqclip_loss(inputs: LossInputs, batch: BatchInfo, **hparams) -> LossOutput:
    """GMPO with the one-sided clip on s_i = mean_t r_t instead of each token."""
    return geometric_mean_loss(inputs, batch, clip="sequence", normalise=True, loss_name="gmpo_seqclip", **hparams)


def gmpo_nonorm_loss(inputs: LossInputs, batch: BatchInfo, **hparams) -> LossOutput:
    """GMPO without 1/|o_i|: w_i = exp(clamp(sum_t l_t, -R, R))."""
    return geometric_mean_loss(inputs, batch, clip="token", normalise=False, loss_name="gmpo_nonorm", **hparams)


GMPO = LossSpec(
    name="gmpo",
    fn=gmpo_loss,
    description="GMPO: per-token log-space clip, geometric mean of ratios per sequence",
    defaults={**_EPS_DEFAULTS, **_KL_DEFAULTS, **_GUARD_DEFAULT},
    sequence_level=True,
    clip_space="log",
)
GMPO_NOCLIP = LossSpec(
    name="gmpo_noclip",
    fn=gmpo_noclip_loss,
    description="GMPO ablation: no clipping",
    defaults={**_KL_DEFAULTS, **_GUARD_DEFAULT},
    sequence_level=True,
)
GMPO_SEQCLIP = LossSpec(
    name="gmpo_seqclip",
    fn=gmpo_seqclip_loss,
    description="GMPO ablation: clip the sequence-level geometric mean instead of tokens",
    defaults={**_EPS_DEFAULTS, **_KL_DEFAULTS, **_GUARD_DEFAULT},
    sequence_level=True,
    clip_space="log",
)
GMPO_NONORM = LossSpec(
    name="gmpo_nonorm",
    fn=gmpo_nonorm_loss,
    description="GMPO ablation: product of clipped ratios, no 1/|o| normalisation",
    defaults={**_EPS_DEFAULTS, **_KL_DEFAULTS, **_GUARD_DEFAULT},
    sequence_level=True,
    clip_space="log",
)
