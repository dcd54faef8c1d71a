"""FIPO (Future-KL Influenced Policy Optimization, arXiv 2603.19835), as ms-swift's
``loss_type="fipo"``: DAPO's token loss times a clipped, detached future-KL influence weight.

Per valid token t of sequence i (positions k of the row, m_k its mask, advantage A_t, a (B,)
advantage broadcast), with the raw log ratio r_k = log pi_theta - log pi_old:

    d_k  = m_k * r_k, and 0 where exp(r_k) > dual_clip (when ``dual_clip`` is set: tokens
           beyond the dual-clip cap do not take part in the future KL)
    F_t  = sum_{k >= t} gamma^(k - t) d_k           gamma = 2^(-1 / fipo_decay_rate)
    f_t  = exp(clamp(F_t, -R, R))                   R = log_ratio_bound (overflow guard)
    f_t  = clamp(f_t, 1, 1 + c)       if fipo_clip_high_only   (c = fipo_clip_range; None or 0:
    f_t  = clamp(f_t, 1 - c, 1 + c)   otherwise                 no clip)
    f_t  = clamp(f_t, 0.8, 1.0)       where A_t < 0 and exp(r_t) > fipo_safety_threshold
    l_t  = dapo's l_t * sg(f_t)                     (``ppo_clip``: max(-A rho, -A clamp(rho,
                                                    1 - eps_low, 1 + eps_high)), dual clip)
           (+ beta * KL_t, not weighted)

reduced by ``token-mean`` over the global token count (ms-swift normalises FIPO, like DAPO, by
the completion tokens of all processes). The weight is detached (no gradient flows through
F_t), so token t's gradient is dapo's times f_t; the weight enters as a per-token factor of the
policy term exactly as a rollout IS weight does (it multiplies any given or computed IS weight),
so the maths of the clipped surrogate, its metrics and its paths are dapo's own
(``ppo_clip.clipped_ratio_loss``). The distance k - t counts positions, padding included, as
ms-swift's decay matrix does (padding adds nothing: d_k = 0 there).

Source: ms-swift ``swift/rlhf_trainers/grpo_trainer.py`` (``_compute_fipo_influence`` and the
``fipo`` branch of ``_compute_loss_and_metrics``). Defaults: ``fipo_decay_rate`` 32,
``fipo_clip_range`` 0.2, ``fipo_clip_high_only`` True, ``fipo_safety_threshold`` 4.0 (ms-swift
``swift/rlhf_trainers/args_mixin.py``, ``GRPOArgumentsMixin``; the safety band [0.8, 1.0] is a
constant there too); ``eps_low`` 0.2 (ms-swift's ``epsilon``), ``eps_high`` 0.28 and
``dual_clip`` None (ms-swift's ``delta``; its FIPO recipe ``examples/train/grpo/internal/fipo.sh``
sets ``epsilon_high 0.28``, DAPO's clip-higher, and ``delta 10``). The overflow guard on F_t
changes nothing while the weight is clipped (e^20 lies far outside any clip band); without a
clip it keeps the weight finite for finite inputs.

Non-finite values: a NaN or +-inf log ratio makes its own token's term non-finite (dapo's) and
the shared rule (``tail.finish``) makes the loss and gradient non-finite; the weight reads the
log ratio with non-finite values as 0, so that ``nonfinite_tokens`` counts the token once.
Split invariance: F_t reads its own row only and the reduction is the global token mean, so any
row split with the global counts gives the whole batch's gradient.
Shapes: every tensor (B, T); F and f (B, T).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from gmpo_plugins.core.losses.ppo_clip import DR_GRPO_NORM_LENGTH, clipped_ratio_loss
from gmpo_plugins.core.per_token import COMMON_SOURCES
from gmpo_plugins.core.prepared import LOG_RATIO_GUARD, clamp_or_nan, compute_dtype
from gmpo_plugins.core.reduce import TOKEN_MEAN, as_bool_mask
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction

SAFETY_BAND = (0.8, 1.0)
"""The band ms-swift clamps the weight of an unsafe token to (a constant there)."""

METRIC_KEYS = ("fipo_future_kl_mean", "fipo_influence_weight_mean")
"""FIPO's own metrics (ms-swift's ``fipo/future_kl_mean``, ``fipo/influence_weight_mean``): the
means of F_t and of f_t (before any rollout IS weight) over the valid tokens, detached."""

_BLOCK = 128
"""Positions per block of ``future_kl``: a (block, block) decay matrix, O(B T block) work."""


def future_kl(delta: torch.Tensor, gamma: float) -> torch.Tensor:
    """F (B, T): F_t = sum_{k >= t} gamma^(k - t) delta_k for ``delta`` (B, T).

    By blocks of positions from the end: inside a block an upper-triangular decay matrix, plus
    gamma^(e - t) F_e carried from the next block (e its first position), which is exactly the
    rest of the sum. ms-swift forms the (T, T) decay matrix by column blocks (O(B T^2) work);
    this is the same sum in O(B T block).
    """
    length = delta.shape[-1]
    steps = torch.arange(_BLOCK, device=delta.device, dtype=delta.dtype)
    distance = steps[None, :] - steps[:, None]  # [t, k] = k - t
    decay = torch.where(distance >= 0, gamma ** distance.clamp_min(0), 0.0)
    carry = torch.zeros_like(delta[..., 0])
    blocks = []
    for start in reversed(range(0, length, _BLOCK)):
        size = min(_BLOCK, length - start)
        block = delta[..., start : start + size] @ decay[:size, :size].T
        block = block + carry[..., None] * gamma ** (size - steps[:size])
        carry = block[..., 0]
        blocks.append(block)
    return torch.cat(blocks[::-1], dim=-1)


def influence_weight(
    inputs: LossInputs,
    *,
    fipo_decay_rate: float,
    fipo_clip_range: float | None,
    fipo_clip_high_only: bool,
    fipo_safety_threshold: float | None,
    dual_clip: float | None,
    log_ratio_bound: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(f, F): the detached influence weight and future KL (B, T), 1 and 0 at padding (module
    docstring)."""
    dtype = compute_dtype(inputs.log_probs.dtype)
    mask = as_bool_mask(inputs.mask)
    with torch.no_grad():
        log_ratio = inputs.log_probs.detach().to(dtype) - inputs.old_log_probs.detach().to(dtype)
        log_ratio = torch.where(mask, log_ratio, 0.0)
        log_ratio = torch.where(torch.isfinite(log_ratio), log_ratio, 0.0)  # the tail reports non-finite ones
        delta = log_ratio
        if dual_clip is not None:
            delta = torch.where(log_ratio > math.log(dual_clip), 0.0, log_ratio)
        future = future_kl(delta, 2.0 ** (-1.0 / fipo_decay_rate))
        weight = torch.exp(clamp_or_nan(future, -log_ratio_bound, log_ratio_bound))
        if fipo_clip_range is not None and fipo_clip_range > 0:
            low = 1.0 if fipo_clip_high_only else 1.0 - fipo_clip_range
            weight = weight.clamp(low, 1.0 + fipo_clip_range)
        if fipo_safety_threshold is not None:
            advantages = inputs.advantages.detach().to(dtype)
            advantages = advantages[:, None] if advantages.dim() == 1 else advantages
            unsafe = (advantages < 0) & (log_ratio > math.log(fipo_safety_threshold))
            weight = torch.where(unsafe, weight.clamp(*SAFETY_BAND), weight)
        return torch.where(mask, weight, 1.0), torch.where(mask, future, 0.0)


def fipo_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    fipo_decay_rate: float,
    fipo_clip_range: float | None,
    fipo_clip_high_only: bool,
    fipo_safety_threshold: float | None,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """FIPO (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        out = empty_loss(inputs, kl=True, dual_clip=dual_clip is not None)
        out.metrics.update({key: out.loss.detach().clone() for key in METRIC_KEYS})
        return out
    weight, future = influence_weight(
        inputs,
        fipo_decay_rate=fipo_decay_rate,
        fipo_clip_range=fipo_clip_range,
        fipo_clip_high_only=fipo_clip_high_only,
        fipo_safety_threshold=fipo_safety_threshold,
        dual_clip=dual_clip,
        log_ratio_bound=log_ratio_bound,
    )
    mask = as_bool_mask(inputs.mask)
    count = mask.sum().clamp_min(1)
    metrics = {
        "fipo_future_kl_mean": (future.sum() / count).detach(),
        "fipo_influence_weight_mean": (torch.where(mask, weight, 0.0).sum() / count).detach(),
    }
    given = inputs.rollout_is_weights
    if given is not None:
        given = given.detach().to(weight.dtype)
        weight = weight * (given if given.dim() == 2 else given[:, None])
    out = clipped_ratio_loss(
        replace(inputs, rollout_is_weights=weight),
        batch,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip=dual_clip,
        reduction=reduction,
        norm_length=DR_GRPO_NORM_LENGTH,  # unused by token-mean
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        log_ratio_bound=log_ratio_bound,
        loss_name="fipo",
    )
    out.metrics.update(metrics)
    return out


_ARGS = "ms-swift swift/rlhf_trainers/args_mixin.py GRPOArgumentsMixin"
_FIPO_ARGS = {
    "fipo_decay_rate": 32.0,
    "fipo_clip_range": 0.2,
    "fipo_clip_high_only": True,
    "fipo_safety_threshold": 4.0,
}

FIPO = LossSpec(
    name="fipo",
    fn=fipo_loss,
    description="ms-swift fipo: dapo's token loss times a clipped future-KL influence weight (detached)",
    defaults={
        **_FIPO_ARGS,
        "eps_low": 0.2,
        "eps_high": 0.28,
        "dual_clip": None,
        "reduction": TOKEN_MEAN,
        "kl_beta": 0.0,
        "kl_estimator": "k3",
        "kl_clamp": None,
        "log_ratio_bound": LOG_RATIO_GUARD,
    },
    sources={
        **{name: f"{_ARGS} {name} {value}" for name, value in _FIPO_ARGS.items()},
        "eps_low": f"{_ARGS} epsilon 0.2",
        "eps_high": "ms-swift examples/train/grpo/internal/fipo.sh epsilon_high 0.28 (DAPO's clip-higher)",
        "dual_clip": f"{_ARGS} delta None",
        "reduction": "ms-swift swift/rlhf_trainers/grpo_trainer.py: fipo normalised by the global token count, as dapo",
        **COMMON_SOURCES,
    },
    clip_space="ratio",
    reductions=(TOKEN_MEAN,),  # ms-swift normalises fipo by the global token count, as dapo
    formula="l_t = dapo's l_t * sg(clamp(exp(sum_{k>=t} gamma^(k-t) r_k), 1, 1 + c))",
    native=("ms-swift:fipo",),
)
