"""AReaL's decoupled PPO and M2PO: PPO clip against a proximal policy, with the behaviour
policy's tokens weighted (decoupled PPO) and, in M2PO, the tokens of largest second moment
masked.

Three policies per valid token t: pi_theta (``log_probs``), the proximal policy pi_prox
(``old_log_probs``: the trainer's recomputed log-probs) and the behaviour policy pi_behave
(``rollout_log_probs``: the rollout engine's, possibly several versions old). With advantage
A_t (a (B,) advantage is broadcast):

    rho_t = exp(clamp(log pi_theta - log pi_prox, -R, R))     R = log_ratio_bound
    u_t   = pi_prox / pi_behave  (detached; 0 outside [lo, hi] with mode "mask", clamped with
            "truncate": the rollout correction, ``core.correction``)
    l_t   = max(-A_t rho_t, -A_t clamp(rho_t, 1 - eps_low, 1 + eps_high)) * u_t   (grpo's l_t,
            dual clip included)

reduced by ``reduction`` (default ``token-mean``: AReaL's ``sum / loss_mask.count_nonzero()``).
The behaviour weight is the rollout correction, not a second copy of it: the spec's own
correction defaults are ``rollout_is="token"``, ``rollout_is_mode="mask"``,
``rollout_is_threshold=5.0`` (AReaL ``areal/api/cli_args.py`` ``RejectionSamplingConfig``:
level token, action mask, metric ratio, upper 5.0, lower None), any of them overridable
(``rollout_is_mode="truncate"`` is AReaL's ``action="clamp"``; ``rollout_is=None`` its
``rejection_sampling=None``). A masked token keeps its place in the token count, as AReaL's
count taken before rejection (``rollout_mask_count="keep"``). The ratio's maths is grpo's
(``ppo_clip``), with AReaL's defaults: eps 0.2 / 0.2 (``eps_clip``, ``eps_clip_higher=None``),
no dual clip (``c_clip=None``); source ``areal/utils/functional/functional.py``
``ppo_actor_loss_fn``.

M2PO (arXiv 2510.01161; AReaL ``areal/trainer/ppo/actor.py`` ``_apply_m2po_masking``) first
masks tokens by the second moment m_t = (log pi_behave - log pi_prox)^2 over the micro-batch's
valid tokens: sorted in decreasing order, the k largest are masked, k the least number whose
remaining mean is below ``m2_threshold`` (all but one when none is). Masked tokens leave the
mask, so a local token count no longer counts them (AReaL divides by the M2PO mask's count).
Default ``m2_threshold`` 0.04 (AReaL ``examples/math/gsm8k_m2po.yaml``, which also sets the
behaviour weight above). The selection reads the whole micro-batch, so m2po is NOT
split-invariant (declared in its spec; AReaL selects over each micro-batch too). A token
whose m_t is not finite is never masked, so that a NaN or +-inf rollout log-prob at a valid
token keeps the loss and gradient non-finite; it counts as 0 in the selection.

Shapes: every tensor (B, T).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from gmpo_plugins.core.kernels import TOKEN_IMPLS
from gmpo_plugins.core.losses.ppo_clip import DR_GRPO_NORM_LENGTH, NORM_LENGTH_SOURCE, clipped_ratio_loss
from gmpo_plugins.core.per_token import COMMON_SOURCES
from gmpo_plugins.core.prepared import LOG_RATIO_GUARD
from gmpo_plugins.core.reduce import REDUCTIONS, TOKEN_MEAN, as_bool_mask
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput

BEHAVIOUR_WEIGHT = {"rollout_is": "token", "rollout_is_mode": "mask", "rollout_is_threshold": 5.0}
"""AReaL's behaviour weight pi_prox / pi_behave as correction options (module docstring)."""


def decoupled_ppo_loss(inputs: LossInputs, batch: BatchInfo, **hparams: Any) -> LossOutput:
    """Decoupled PPO: grpo's clipped ratio against the proximal policy (module docstring)."""
    return clipped_ratio_loss(inputs, batch, loss_name="decoupled_ppo", **hparams)


def m2po_mask(inputs: LossInputs, threshold: float) -> torch.Tensor:
    """(B, T) bool: ``inputs.mask`` less the tokens M2PO masks (module docstring). Static shapes
    and no synchronisation: padding sorts after every valid token (m_t >= 0 > -1) and the count
    to mask is found with tensor operations."""
    assert inputs.rollout_log_probs is not None  # LossSpec.requires
    mask = as_bool_mask(inputs.mask)
    dtype = torch.promote_types(inputs.log_probs.dtype, torch.float32)
    delta = inputs.rollout_log_probs.detach().to(dtype) - inputs.old_log_probs.detach().to(dtype)
    m2 = delta.square()
    finite = torch.isfinite(m2)
    values = torch.where(mask, torch.where(finite, m2, 0.0), -1.0).flatten()  # (B * T,)
    ordered, order = torch.sort(values, descending=True, stable=True)
    valid = ordered >= 0
    remaining = valid.flip(0).cumsum(0).flip(0)  # valid tokens from position i on
    suffix = torch.where(valid, ordered, 0.0).flip(0).cumsum(0).flip(0) / remaining.clamp_min(1).to(dtype)
    below = (suffix < threshold) & valid
    count = torch.where(below.any(), below.to(torch.int64).argmax(), valid.sum() - 1)
    keep_sorted = torch.arange(values.numel(), device=mask.device) >= count
    keep = torch.empty_like(keep_sorted).scatter_(0, order, keep_sorted).view_as(mask)
    return (keep | ~finite) & mask


def m2po_loss(inputs: LossInputs, batch: BatchInfo, *, m2_threshold: float, **hparams: Any) -> LossOutput:
    """M2PO: decoupled PPO on the tokens its second-moment mask keeps (module docstring)."""
    if inputs.log_probs.numel() > 0:  # B = 0 or T = 0: clipped_ratio_loss's empty result
        inputs = replace(inputs, mask=m2po_mask(inputs, m2_threshold))
    return clipped_ratio_loss(inputs, batch, loss_name="m2po", **hparams)


_DEFAULTS = {
    "eps_low": 0.2,
    "eps_high": 0.2,
    "dual_clip": None,
    "reduction": TOKEN_MEAN,
    "norm_length": DR_GRPO_NORM_LENGTH,
    "kl_beta": 0.0,
    "kl_estimator": "k3",
    "kl_clamp": None,
    "log_ratio_bound": LOG_RATIO_GUARD,
}
_AREAL = "AReaL areal/api/cli_args.py"
_SOURCES = {
    "eps_low": f"{_AREAL} eps_clip 0.2",
    "eps_high": f"{_AREAL} eps_clip_higher None (eps_clip, 0.2)",
    "dual_clip": f"{_AREAL} c_clip None",
    "reduction": "AReaL areal/utils/functional/functional.py ppo_actor_loss_fn: sum / loss_mask.count_nonzero()",
    "norm_length": NORM_LENGTH_SOURCE,
    **COMMON_SOURCES,
    **dict.fromkeys(
        BEHAVIOUR_WEIGHT, f"{_AREAL} RejectionSamplingConfig: level token, action mask, metric ratio, upper 5.0"
    ),
}

DECOUPLED_PPO = LossSpec(
    name="decoupled_ppo",
    fn=decoupled_ppo_loss,
    description="AReaL decoupled PPO: PPO clip against the proximal (old) policy, "
    "times the masked behaviour weight pi_old / pi_rollout",
    defaults=_DEFAULTS,
    sources=_SOURCES,
    correction=BEHAVIOUR_WEIGHT,
    clip_space="ratio",
    reductions=REDUCTIONS,
    impls=TOKEN_IMPLS,
    requires=("rollout_log_probs",),
    formula="grpo's l_t * u_t,  u_t = pi_old / pi_rollout, 0 outside (0, 5]",
    native=("areal:decoupled_ppo",),
)
M2PO = LossSpec(
    name="m2po",
    fn=m2po_loss,
    description="AReaL M2PO: decoupled_ppo without the tokens of largest (log pi_rollout - log pi_old)^2",
    defaults={**_DEFAULTS, "m2_threshold": 0.04},
    sources={**_SOURCES, "m2_threshold": "AReaL examples/math/gsm8k_m2po.yaml m2_threshold 0.04"},
    correction=BEHAVIOUR_WEIGHT,
    clip_space="ratio",
    reductions=REDUCTIONS,
    impls=TOKEN_IMPLS,
    split_invariant=False,
    requires=("rollout_log_probs",),
    formula="decoupled_ppo's l_t on tokens kept while mean (log pi_rollout - log pi_old)^2 >= m2_threshold",
    native=("areal:m2po",),
)
