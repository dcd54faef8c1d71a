"""Arithmetic-mean baselines: token-level PPO clip in ratio space (GRPO, DAPO, Dr.GRPO).

Per valid token t of sequence i, with advantage A_t (a (B,) advantage is broadcast):

    r_t   = clamp(log pi_theta - log pi_old, -R, R)          R = log_ratio_bound; NaN for a
                                                             non-finite r_t (prepared.clamp_or_nan)
    rho_t = exp(r_t)
    l_t   = max(-A_t * rho_t, -A_t * clamp(rho_t, 1 - eps_low, 1 + eps_high))
    l_t   = min(l_t, -A_t * dual_clip)   if A_t < 0 and dual_clip is set (Ye et al. 2020)
    l_t  += beta * KL_t                  when ref_log_probs are given

then reduced over the micro-batch by ``reduction`` (see ``reduce.reduce_tokens``):
``seq-mean-token-mean`` (GRPO), ``token-mean`` (DAPO), ``seq-mean-token-sum-norm``
(Dr.GRPO, divides each sequence's sum by the constant ``norm_length``).
Rollout IS weights multiply the policy-gradient part per token.

Dr.GRPO's constant is part of the method: ``norm_length`` defaults to
``DR_GRPO_NORM_LENGTH`` = 1024, never to the padded width of the micro-batch, which would
change with every split and padding (the gradient of a batch would then depend on how it
is cut into micro-batches). Set it to the maximum completion length, as the Dr.GRPO and
GMPO code do (Oat's ``generate_max_length``); the adapters pass TRL's
``max_completion_length`` and verl's ``loss_scale_factor``. Another constant only rescales
the loss (and so the learning rate).
"""

from __future__ import annotations

from typing import Any

import torch

from gmpo_plugins.core.kernels import TOKEN_IMPLS, check_impl
from gmpo_plugins.core.kernels.token import fused_clipped_ratio_loss
from gmpo_plugins.core.per_token import COMMON_SOURCES
from gmpo_plugins.core.prepared import LOG_RATIO_GUARD, clamp_or_nan, prepare, token_is_weights
from gmpo_plugins.core.reduce import (
    REDUCTIONS,
    SEQ_MEAN_TOKEN_MEAN,
    SEQ_MEAN_TOKEN_SUM_NORM,
    TOKEN_MEAN,
    masked_mean,
    masked_sum,
)
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import eager_row_stats, empty_loss, finish, is_empty, kl_rows
from gmpo_plugins.core.types import BatchInfo, Impl, LossInputs, LossOutput, Reduction


def clipped_ratio_loss(inputs: LossInputs, batch: BatchInfo, *, impl: Impl = "auto", **hparams: Any) -> LossOutput:
    """Token-level PPO clipped surrogate: ``impl="eager"`` runs ``eager_clipped_ratio_loss``
    (the test oracle); "auto" (the registry's path) and "torch" run
    ``kernels.token.fused_clipped_ratio_loss`` with the same keywords, same numbers. There
    is no Triton kernel for the token-level losses (``impl="triton"`` is an error)."""
    check_impl(impl)
    if impl not in TOKEN_IMPLS:
        loss_name = hparams.get("loss_name", "grpo")
        raise ValueError(f"{loss_name}: impl='triton' has no kernel for token-level losses; use 'auto' or 'torch'")
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True, dual_clip=hparams.get("dual_clip") is not None)
    if impl == "eager":
        return eager_clipped_ratio_loss(inputs, batch, **hparams)
    return fused_clipped_ratio_loss(inputs, batch, **hparams)


def eager_clipped_ratio_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None,
    reduction: Reduction,
    norm_length: int,
    kl_beta: float,
    kl_estimator: str,
    log_ratio_bound: float,
    kl_clamp: float | None = None,
    loss_name: str = "grpo",
) -> LossOutput:
    """Token-level PPO clipped surrogate (module docstring)."""
    p = prepare(inputs, sequence_level=False)
    mask, advantages = p.mask, p.advantages
    ratio = torch.exp(clamp_or_nan(p.log_ratio, -log_ratio_bound, log_ratio_bound))  # NaN where not finite
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    pg = torch.maximum(unclipped, clipped)
    negative = advantages < 0
    clipped_high = (advantages > 0) & (ratio > 1.0 + eps_high) & mask
    clipped_low = negative & (ratio < 1.0 - eps_low) & mask
    extra = {}
    if dual_clip is not None:
        cap = -advantages * dual_clip
        capped = negative & (pg > cap)
        pg = torch.where(capped, cap, pg)
        extra["clip_frac_dual"] = masked_mean((capped & mask).to(pg.dtype), mask).detach()
    weights = token_is_weights(p)
    if weights is not None:
        pg = pg * weights
    dtype = p.log_ratio.dtype
    kl = kl_rows(
        inputs, mask, dtype, kl_beta=kl_beta, kl_estimator=kl_estimator, kl_clamp=kl_clamp, loss_name=loss_name
    )
    return finish(
        masked_sum(pg, mask, dim=-1),
        eager_row_stats(p.log_ratio, mask, clipped_low, clipped_high),
        batch,
        inputs=inputs,
        reduction=reduction,
        norm_length=norm_length,
        kl=kl,
        kl_beta=kl_beta,
        extra=extra,
    )


def grpo_loss(inputs: LossInputs, batch: BatchInfo, **hparams: Any) -> LossOutput:
    """GRPO (default reduction seq-mean-token-mean)."""
    return clipped_ratio_loss(inputs, batch, loss_name="grpo", **hparams)


def dapo_loss(inputs: LossInputs, batch: BatchInfo, **hparams: Any) -> LossOutput:
    """DAPO: token-mean, clip-higher (eps_high 0.28)."""
    return clipped_ratio_loss(inputs, batch, loss_name="dapo", **hparams)


def dr_grpo_loss(inputs: LossInputs, batch: BatchInfo, **hparams: Any) -> LossOutput:
    """Dr.GRPO: per-sequence token sum over a constant length."""
    return clipped_ratio_loss(inputs, batch, loss_name="dr_grpo", **hparams)


DR_GRPO_NORM_LENGTH = 1024
"""Default constant length of ``seq-mean-token-sum-norm`` (module docstring)."""

NORM_LENGTH_SOURCE = (
    "registry constant (no framework default fits: Dr.GRPO's code divides by Oat's generate_max_length, "
    "TRL by max_completion_length); read by seq-mean-token-sum-norm only: set it to the maximum completion length"
)
"""Where ``norm_length``'s default comes from (``LossSpec.sources``)."""

_PPO_EPS = "verl trainer/config/actor/actor.yaml clip_ratio_low/high 0.2, TRL trainer/grpo_config.py epsilon 0.2"
_DAPO = "DAPO paper (arXiv 2503.14476) §4.1, as TRL docs/source/paper_index.md cites it"
_DUAL_CLIP = (
    "off, as TRL and SkyRL's regular loss; verl's clip_ratio_c 3.0 (actor.yaml) is on by default: dual_clip=3 for it"
)


def _sources(reduction: str, eps_low: str, eps_high: str) -> dict[str, str]:
    return {
        "eps_low": eps_low,
        "eps_high": eps_high,
        "dual_clip": _DUAL_CLIP,
        "reduction": reduction,
        "norm_length": NORM_LENGTH_SOURCE,
        **COMMON_SOURCES,
    }


def _defaults(reduction: Reduction, eps_high: float) -> dict[str, object]:
    return {
        "eps_low": 0.2,
        "eps_high": eps_high,
        "dual_clip": None,
        "reduction": reduction,
        "norm_length": DR_GRPO_NORM_LENGTH,
        "kl_beta": 0.0,
        "kl_estimator": "k3",
        "kl_clamp": None,
        "log_ratio_bound": LOG_RATIO_GUARD,
    }


GRPO = LossSpec(
    name="grpo",
    fn=grpo_loss,
    description="GRPO: token-level PPO clip in ratio space, arithmetic mean",
    formula="l_t = max(-A_t rho_t, -A_t clamp(rho_t, 1 - eps_low, 1 + eps_high)),  rho_t = exp(r_t)",
    native=("verl:vanilla", "trl:grpo", "skyrl:regular", "openrlhf:ppo", "liger:grpo"),
    defaults=_defaults(SEQ_MEAN_TOKEN_MEAN, 0.2),
    sources=_sources(
        "GRPO (arXiv 2402.03300): token mean per sequence, then the mean over sequences", _PPO_EPS, _PPO_EPS
    ),
    clip_space="ratio",
    reductions=REDUCTIONS,
    impls=TOKEN_IMPLS,
)
DAPO = LossSpec(
    name="dapo",
    fn=dapo_loss,
    description="DAPO: grpo with token-mean reduction and clip-higher",
    formula="grpo's l_t, token-mean",
    native=("verl:vanilla (token-mean)", "trl:dapo", "skyrl:regular (token_mean)", "liger:dapo"),
    defaults=_defaults(TOKEN_MEAN, 0.28),
    sources=_sources(
        "DAPO paper (arXiv 2503.14476): token-level policy-gradient loss, TRL's loss_type dapo",
        f"{_DAPO}: 0.2",
        f"{_DAPO}: clip-higher 0.28",
    ),
    clip_space="ratio",
    reductions=(TOKEN_MEAN,),  # DAPO is defined by its token-mean
    impls=TOKEN_IMPLS,
)
DR_GRPO = LossSpec(
    name="dr_grpo",
    fn=dr_grpo_loss,
    description="Dr.GRPO: grpo with per-sequence token sums over a constant length",
    formula="grpo's l_t, sum_i [sum_t l_t / norm_length] / N",
    native=(
        "verl:vanilla (seq-mean-token-sum-norm)",
        "trl:dr_grpo",
        "skyrl:regular (seq_mean_token_sum_norm)",
        "liger:dr_grpo",
    ),
    defaults=_defaults(SEQ_MEAN_TOKEN_SUM_NORM, 0.2),
    sources=_sources("Dr.GRPO (arXiv 2503.20783): each sequence's token sum over a constant", _PPO_EPS, _PPO_EPS),
    clip_space="ratio",
    reductions=(SEQ_MEAN_TOKEN_SUM_NORM,),  # Dr.GRPO is defined by its constant-length sum
    impls=TOKEN_IMPLS,
)
