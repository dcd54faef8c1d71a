"""GMPO (Geometric-Mean Policy Optimization, arXiv 2507.20673) and the paper's ablations.

For sequence i with valid tokens t (|o_i| of them) and sequence advantage A_i:

    r_t = clamp(log pi_theta - log pi_old, -R, R)       R = log_ratio_bound (overflow guard)
    l_t = min(r_t, eps_high)  if A_i > 0                one-sided log-space clip, per token
          max(r_t, -eps_low)  if A_i < 0
          r_t                 if A_i = 0                (no side: L_i's policy term is 0)
    s_i = sum_t l_t / |o_i|                             geometric mean in log space
    w_i = exp(s_i)
    L_i = -A_i * w_i * rho_i + beta * mean_t KL_t       rho_i: rollout IS weight of the sequence

Zero advantage: a sequence with A_i = 0 is clipped on neither side and counts in neither
clip fraction. The authors' code takes the positive branch there (``sgn = -1 if A >= 0``,
min(r_t, eps_high)) and TRL's GMPOTrainer the negative one (``A > 0`` else max); for every
variant L_i's policy term is -0 * w_i = 0 and its tokens get zero policy gradient under all
three conventions (w_i is finite: see the guards below), so only the clip counts differ.

A clipped token gets zero gradient; every other valid token of sequence i gets
``dL_i/dlog_prob_t = -A_i * w_i * rho_i / |o_i|``. The micro-batch loss is
``sum_i L_i / N * dp_size`` (``reduce_sequences``), so accumulation over micro-batches
and averaging over data-parallel ranks reproduce the whole-batch mean exactly.

Guard: R = 20 keeps w_i <= e^20 for any finite input; a NaN or +-inf log ratio (a
non-finite log-prob or old log-prob at a valid token, -inf included) is not clamped but
becomes NaN (``prepared.clamp_or_nan``), and so does the loss. Tokens with |r_t| > R get zero
gradient, on either side; with the default eps this changes the loss only where the
unclipped side is unbounded (A_i < 0 and r_t > R), or for A_i > 0 tokens whose ratio
is below e^-20, and in gmpo_noclip wherever |r_t| > R.

Rollout IS weights (``rollout_is_aggregation``, ``prepared.IS_AGGREGATIONS``): default
``geometric_mean``, rho_i = exp(mean_t log w_t). GMPO's own weight is the geometric mean of
the token ratios, so rho_i * w_i is then the geometric mean of the token ratios against the
rollout policy, pi_theta / pi_rollout: one consistent correction. For positive weights it is
verl's ``geo_mean`` (which takes log(w_t + 1e-10)). A token of weight exactly 0 (a masked
token) leaves the row: w_i, rho_i and |o_i| run over the row's other tokens, so one masked
token never zeros its sequence; a row whose weights are all 0 trains nothing
(``core.correction``, the zero-weight rule). verl's geo_mean instead multiplies the row by
(1e-10)^(1/|o_i|) per zero weight (0.977 for one in 1,000 tokens).

Ablations (paper Table 3), as the authors' code (callsys/GMPO ``train_zero_math_gmpo.py``)
runs them:

- ``gmpo_noclip``: l_t = r_t (the authors set eps = 1000).
- ``gmpo_seqclip``: no token clip; the one-sided clip applies to the SUM of the log
  ratios, S_i = sum_t r_t, clipped to min(S_i, eps_high) if A_i > 0 or max(S_i, -eps_low)
  if A_i < 0, and only then divided by |o_i|: s_i = clip(S_i) / |o_i|. The bound on the
  sum is |o_i| times tighter than the same eps on the mean. A clipped sequence gets zero
  gradient on all its tokens. (Clipping the mean instead is GSPO with log-space bounds,
  ``gspo`` with eps_low = 1 - e^-eps, eps_high = e^eps - 1, so no separate loss is kept.)
- ``gmpo_nonorm``: s_i = sum_t l_t without 1/|o_i| (the authors' ``gmpo_without_norm``:
  the product of the clipped token ratios), clamped to +-P with the product guard
  P = 0.9 * ln(finfo(dtype of log_probs).max): about 79.8 for float32 and bfloat16, 9.98
  for float16, 639 for float64, so that w_i and the gradient, which has log_probs' dtype,
  stay finite. Within the guard the result is the authors' (who have no guard: their
  float32 weight overflows to inf past 88.7); beyond it the sequence saturates (its weight
  stays e^P and its tokens get zero gradient).
"""

from __future__ import annotations

from typing import Any

import torch

from gmpo_plugins.core.clip import one_sided_clip, required_eps
from gmpo_plugins.core.kernels import SEQUENCE_IMPLS, check_impl, fused_geometric_mean_loss
from gmpo_plugins.core.per_token import COMMON_SOURCES
from gmpo_plugins.core.prepared import (
    LOG_RATIO_GUARD,
    clamp_or_nan,
    per_token_is_gradient,
    prepare,
    product_guard,
    sequence_is_weights,
)
from gmpo_plugins.core.reduce import SEQUENCE
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import eager_row_stats, empty_loss, finish, is_empty, kl_rows
from gmpo_plugins.core.types import BatchInfo, Clip, Impl, LossInputs, LossOutput

_KL_DEFAULTS = {"kl_beta": 0.0, "kl_estimator": "k3", "kl_clamp": None}
_GUARD_DEFAULT = {"log_ratio_bound": LOG_RATIO_GUARD}
_EPS_DEFAULTS = {"eps_low": 0.4, "eps_high": 0.4}
_IS_DEFAULT = {"rollout_is_aggregation": "geometric_mean"}
_EPS_SOURCE = (
    "GMPO paper (arXiv 2507.20673): clip range (e^-0.4, e^0.4), the best of its clip-range ablation; "
    "the authors' code callsys/GMPO train_zero_math_gmpo.py"
)
_SOURCES = {
    "eps_low": _EPS_SOURCE,
    "eps_high": _EPS_SOURCE,
    **COMMON_SOURCES,
    "rollout_is_aggregation": "GMPO's weight is a geometric mean, so is verl trainer/ppo/core_algos.py geo_mean's IS "
    "weight (module docstring)",
}
_NOCLIP_SOURCES = {key: value for key, value in _SOURCES.items() if key not in _EPS_DEFAULTS}


def geometric_mean_loss(inputs: LossInputs, batch: BatchInfo, *, impl: Impl = "auto", **hparams: Any) -> LossOutput:
    """The GMPO family: ``impl="eager"`` runs ``eager_geometric_mean_loss`` (the test oracle);
    "auto" (the registry's path), "torch" and "triton" run
    ``kernels.fused_geometric_mean_loss`` with the same keywords, same numbers."""
    check_impl(impl)
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    if impl == "eager":
        return eager_geometric_mean_loss(inputs, batch, **hparams)
    return fused_geometric_mean_loss(inputs, batch, impl=impl, **hparams)


def eager_geometric_mean_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    clip: Clip,
    normalise: bool,
    kl_beta: float,
    kl_estimator: str,
    log_ratio_bound: float,
    rollout_is_aggregation: str = "geometric_mean",
    kl_clamp: float | None = None,
    eps_low: float | None = None,
    eps_high: float | None = None,
    loss_name: str = "gmpo",
) -> LossOutput:
    """The GMPO family in one place (module docstring); ``clip`` is ``"token"``,
    ``"sequence"`` or ``"none"``."""
    p = prepare(inputs, sequence_level=True)
    mask = p.mask
    bound = log_ratio_bound
    r = clamp_or_nan(p.log_ratio, -bound, bound)  # NaN where the log ratio is not finite
    r = per_token_is_gradient(r, p.rollout_is_weights, mask, rollout_is_aggregation)
    positive = p.advantages > 0  # (B,)
    negative = p.advantages < 0
    no_clip = torch.zeros_like(mask)
    clipped_low = clipped_high = no_clip

    if clip == "token":
        eps = required_eps(clip, eps_low, eps_high)
        r, clipped_low, clipped_high = one_sided_clip(r, positive[:, None] & mask, negative[:, None] & mask, *eps)
    summed = r.sum(-1)  # padding holds 0
    if clip == "sequence":  # the authors' seqclip: clip the sum, then divide by |o_i|
        eps = required_eps(clip, eps_low, eps_high)
        summed, seq_low, seq_high = one_sided_clip(summed, positive & p.rows, negative & p.rows, *eps)
        clipped_low, clipped_high = seq_low[:, None] & mask, seq_high[:, None] & mask
    if normalise:
        s = summed / p.lengths.clamp_min(1)
    else:
        guard = product_guard(inputs.log_probs.dtype)
        s = clamp_or_nan(summed, -guard, guard)

    kl = kl_rows(
        inputs,
        mask,
        p.log_ratio.dtype,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name=loss_name,
    )
    return finish(
        torch.exp(s),
        eager_row_stats(p.log_ratio, mask, clipped_low, clipped_high),
        batch,
        inputs=inputs,
        reduction=SEQUENCE,
        rho=sequence_is_weights(inputs.rollout_is_weights, mask, rollout_is_aggregation, p.log_ratio.dtype),
        coef=-p.advantages,
        kl=kl,
        kl_beta=kl_beta,
    )


def gmpo_loss(inputs: LossInputs, batch: BatchInfo, **hparams: Any) -> LossOutput:
    """GMPO: token-level log-space clip, geometric mean with 1/|o_i| (module docstring)."""
    return geometric_mean_loss(inputs, batch, clip="token", normalise=True, loss_name="gmpo", **hparams)


def gmpo_noclip_loss(inputs: LossInputs, batch: BatchInfo, **hparams: Any) -> LossOutput:
    """GMPO without clipping: w_i = exp(mean_t r_t)."""
    return geometric_mean_loss(inputs, batch, clip="none", normalise=True, loss_name="gmpo_noclip", **hparams)


def gmpo_seqclip_loss(inputs: LossInputs, batch: BatchInfo, **hparams: Any) -> LossOutput:
    """GMPO ablation as the authors run it: s_i = clip(sum_t r_t) / |o_i|, the one-sided clip
    on the sum of the log ratios instead of each token (module docstring)."""
    return geometric_mean_loss(inputs, batch, clip="sequence", normalise=True, loss_name="gmpo_seqclip", **hparams)


def gmpo_nonorm_loss(inputs: LossInputs, batch: BatchInfo, **hparams: Any) -> LossOutput:
    """GMPO without 1/|o_i|: w_i = exp(clamp(sum_t l_t, -P, P)), P the dtype's product guard."""
    return geometric_mean_loss(inputs, batch, clip="token", normalise=False, loss_name="gmpo_nonorm", **hparams)


GMPO = LossSpec(
    name="gmpo",
    fn=gmpo_loss,
    description="GMPO: per-token log-space clip, geometric mean of ratios per sequence",
    formula="L_i = -A_i exp(sum_t clip(r_t) / |o_i|),  clip one-sided in log space by sign(A_i)",
    native=("verl:geo_mean", "trl:GMPOTrainer (experimental)"),
    defaults={**_EPS_DEFAULTS, **_KL_DEFAULTS, **_GUARD_DEFAULT, **_IS_DEFAULT},
    sources=_SOURCES,
    sequence_level=True,
    clip_space="log",
    impls=SEQUENCE_IMPLS,
)
GMPO_NOCLIP = LossSpec(
    name="gmpo_noclip",
    fn=gmpo_noclip_loss,
    description="GMPO ablation: no clipping",
    formula="L_i = -A_i exp(sum_t r_t / |o_i|)",
    defaults={**_KL_DEFAULTS, **_GUARD_DEFAULT, **_IS_DEFAULT},
    sources=_NOCLIP_SOURCES,
    sequence_level=True,
    impls=SEQUENCE_IMPLS,
)
GMPO_SEQCLIP = LossSpec(
    name="gmpo_seqclip",
    fn=gmpo_seqclip_loss,
    description="GMPO ablation (authors' code): one-sided clip of the sum of log ratios, then 1/|o|",
    formula="L_i = -A_i exp(clip(sum_t r_t) / |o_i|)",
    defaults={**_EPS_DEFAULTS, **_KL_DEFAULTS, **_GUARD_DEFAULT, **_IS_DEFAULT},
    sources=_SOURCES,
    sequence_level=True,
    clip_space="log",
    impls=SEQUENCE_IMPLS,
)
GMPO_NONORM = LossSpec(
    name="gmpo_nonorm",
    fn=gmpo_nonorm_loss,
    description="GMPO ablation: product of clipped ratios, no 1/|o|; saturates past |log product| 0.9*ln(dtype max)",
    formula="L_i = -A_i exp(clamp(sum_t clip(r_t), -P, P))",
    defaults={**_EPS_DEFAULTS, **_KL_DEFAULTS, **_GUARD_DEFAULT, **_IS_DEFAULT},
    sources=_SOURCES,
    sequence_level=True,
    clip_space="log",
    impls=SEQUENCE_IMPLS,
)
