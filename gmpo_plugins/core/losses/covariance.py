"""Clip-Cov and KL-Cov ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv 2505.22617): PPO that restrains the tokens whose log-prob covaries most with
their advantage, the tokens that drive the policy's entropy down.

Per valid token t, with advantage A_t (a (B,) advantage is broadcast), rollout IS weight w_t
and the means over the valid tokens of the micro-batch given:

    r_t    = exp(clamp(log pi_theta - log pi_old, -R, R))      R = log_ratio_bound
    C_t    = (A_t - mean A) * (log pi_theta(o_t) - mean log pi_theta)   (no gradient)
    k      = max(floor(ratio * n), 1)          n valid tokens, ratio = clip_cov_ratio / kl_cov_ratio

    clip_cov  p_t = max(-A_t r_t, -A_t clamp(r_t, 1 - eps_low, 1 + eps_high))   (PPO clip)
              candidates: valid, not clipped by PPO (the clipped term is not the larger one),
              clip_cov_lb < C_t < clip_cov_ub;  S = the k candidates of largest C_t
              l_t = p_t * [t not in S] * w_t                     (S gets no loss, no gradient)
    kl_cov    S = the k valid tokens of largest C_t
              l_t = (-A_t r_t + ppo_kl_coef * |log r_t| * [t in S]) * w_t

    (+ beta * KL_t), reduced by ``reduction`` (default ``token-mean``, verl's and SkyRL's).

Batch dependence, by construction: the means, n, k and S are taken over the tensors the
loss is given, so the loss of a micro-batch depends on which tokens share it, and a split
into micro-batches or ranks does not give the whole-batch gradient (``split_invariant`` is
False). Given the whole batch, the result is the whole-batch result; the normalisation by
``BatchInfo`` is the same as for every other loss.

Selection, deterministic: S is the k largest C_t (candidates only), ties broken by the lower
flat index (row-major), through a stable sort and a rank comparison with k as a tensor, so
nothing is read back to the host (no synchronisation). verl and SkyRL draw clip_cov's k
tokens at random among the candidates (``torch.randperm``, unseeded) and take kl_cov's with
``torch.topk`` (ties unspecified); the registry takes the largest covariances for both, the
tokens the method means to restrain, so that a run is reproducible.

Defaults: clip_cov_ratio = 2e-4, clip_cov_lb = 1, clip_cov_ub = 5, eps 0.2 (the paper's, and
verl's and SkyRL's config). kl_cov_ratio = 2e-3 and ppo_kl_coef = 1 (the method's setting for
7B models, as its verl recipes run it); verl's config defaults to 2e-4 and 0.1, SkyRL's to
0.2 (``kl_cov_frac``: a fraction 100 times either) and 1.
Shapes: every tensor (B, T).
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.per_token import (
    COMMON_DEFAULTS,
    COMMON_SOURCES,
    TOKEN_REDUCTIONS,
    TokenBatch,
    finish_tokens,
    token_batch,
)
from gmpo_plugins.core.reduce import TOKEN_MEAN, masked_mean
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def covariance(t: TokenBatch) -> torch.Tensor:
    """C (B, T): (A_t - mean A) * (log pi_t - mean log pi) over the valid tokens, detached, 0 at padding."""
    with torch.no_grad():
        log_probs = t.log_probs.detach()
        centred_a = t.advantages - masked_mean(t.advantages, t.mask)
        centred_lp = log_probs - masked_mean(log_probs, t.mask)
        return torch.where(t.mask, centred_a * centred_lp, 0.0)


def largest(scores: torch.Tensor, candidates: torch.Tensor, ratio: float, mask: torch.Tensor) -> torch.Tensor:
    """S (B, T) bool: the k = max(floor(ratio * n), 1) ``candidates`` of largest ``scores``
    (n valid tokens of ``mask``), ties to the lower flat index; fewer when fewer are candidates.
    Sync-free: k stays a tensor and is compared with each token's rank in a stable sort."""
    with torch.no_grad():
        n = mask.sum().to(torch.float64)  # float64: floor(n * ratio) is Python's int(ratio * n), as verl's
        k = torch.clamp_min(torch.floor(n * ratio), 1.0)
        flat = torch.where(candidates, scores, -torch.inf).flatten()
        order = torch.sort(flat, descending=True, stable=True).indices
        rank = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
        return (rank.view_as(scores) < k) & candidates


def clip_cov_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    eps_low: float,
    eps_high: float,
    clip_cov_ratio: float,
    clip_cov_lb: float,
    clip_cov_ub: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """Clip-Cov (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    ratio = torch.exp(t.guarded)
    unclipped = -t.advantages * ratio
    clipped = -t.advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    by_ppo = clipped > unclipped
    cov = covariance(t)
    candidates = t.mask & ~by_ppo & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    selected = largest(cov, candidates, clip_cov_ratio, t.mask)
    token_loss = torch.where(selected, 0.0, torch.maximum(unclipped, clipped))
    return finish_tokens(
        token_loss,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="clip_cov",
        clipped_low=by_ppo & (t.advantages < 0),
        clipped_high=by_ppo & (t.advantages > 0),
        extra={"cov_selected_frac": masked_mean(selected.to(ratio.dtype), t.mask).detach()},
    )


def kl_cov_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    kl_cov_ratio: float,
    ppo_kl_coef: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """KL-Cov (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound)
    selected = largest(covariance(t), t.mask, kl_cov_ratio, t.mask)
    penalty = torch.where(selected, ppo_kl_coef * t.guarded.abs(), 0.0)
    return finish_tokens(
        -t.advantages * torch.exp(t.guarded) + penalty,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="kl_cov",
        extra={"cov_selected_frac": masked_mean(selected.to(t.log_ratio.dtype), t.mask).detach()},
    )


_CLIP_COV = "Clip-Cov (arXiv 2505.22617), as verl trainer/config/actor/actor.yaml policy_loss"
_KL_COV = "KL-Cov's setting for 7B models as its verl recipes run it (arXiv 2505.22617)"

CLIP_COV = LossSpec(
    name="clip_cov",
    fn=clip_cov_loss,
    description="Clip-Cov: PPO clip, and no gradient for the tokens of largest advantage/log-prob covariance "
    "(selected per micro-batch: not split-invariant)",
    defaults={
        "eps_low": 0.2,
        "eps_high": 0.2,
        "clip_cov_ratio": 2e-4,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
        "reduction": TOKEN_MEAN,
        **COMMON_DEFAULTS,
    },
    sources={
        "eps_low": "verl trainer/config/actor/actor.yaml clip_ratio_low 0.2, SkyRL eps_clip_low 0.2",
        "eps_high": "verl trainer/config/actor/actor.yaml clip_ratio_high 0.2, SkyRL eps_clip_high 0.2",
        "clip_cov_ratio": f"{_CLIP_COV}: clip_cov_ratio 0.0002",
        "clip_cov_lb": f"{_CLIP_COV}: clip_cov_lb 1.0",
        "clip_cov_ub": f"{_CLIP_COV}: clip_cov_ub 5.0",
        "reduction": "verl trainer/config/actor/actor.yaml loss_agg_mode token-mean",
        **COMMON_SOURCES,
    },
    clip_space="ratio",
    reductions=TOKEN_REDUCTIONS,
    linear_in_advantages=False,
    split_invariant=False,
    formula="l_t = max(-A_t r_t, -A_t clamp(r_t, 1 - eps_low, 1 + eps_high)) * [t not in top-k of C_t in (lb, ub)]",
    native=("verl:clip_cov", "skyrl:clip_cov"),
)
KL_COV = LossSpec(
    name="kl_cov",
    fn=kl_cov_loss,
    description="KL-Cov: -A * r, plus ppo_kl_coef * |log r| on the tokens of largest covariance "
    "(selected per micro-batch: not split-invariant)",
    defaults={"kl_cov_ratio": 2e-3, "ppo_kl_coef": 1.0, "reduction": TOKEN_MEAN, **COMMON_DEFAULTS},
    sources={
        "kl_cov_ratio": f"{_KL_COV}; verl actor.yaml policy_loss.kl_cov_ratio defaults to 0.0002",
        "ppo_kl_coef": f"{_KL_COV}; SkyRL train/config/config.py kl_cov.ppo_kl_coef 1.0 (verl actor.yaml 0.1)",
        "reduction": "verl trainer/config/actor/actor.yaml loss_agg_mode token-mean",
        **COMMON_SOURCES,
    },
    reductions=TOKEN_REDUCTIONS,
    linear_in_advantages=False,
    split_invariant=False,
    formula="l_t = -A_t r_t + ppo_kl_coef * |log r_t| * [t in top-k of C_t]",
    native=("verl:kl_cov", "skyrl:kl_cov"),
)
