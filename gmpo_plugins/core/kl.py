"""KL-divergence estimators between the current and a reference policy, per token.

With ``d = ref_log_probs - log_probs`` (B, T):

    k1 = -d                    unbiased, high variance
    k2 = d^2 / 2
    k3 = expm1(d') - d'        d' = clamp(d, -20, 20); unbiased, non-negative (Schulman's
                               "low variance" estimator, e^d - d - 1)
    abs = |d|                  verl's ``abs``
    k1+, k3+, abs+             straight-through (verl's ``+`` suffix): the value of k1, k3 or
                               abs, the gradient of k2 (whose expected gradient is that of the
                               KL): k2 - sg(k2) + sg(estimate)

Only k3 clamps ``d`` (to +-20, before ``exp``, as verl's ``low_var_kl``), so that it stays
finite for any finite input; k1 and k2 are polynomials of ``d`` and use it as it is (as
verl's ``kl`` and ``mse``). k3 is written ``expm1(d') - d'``: ``exp(d) - 1`` would lose
the leading digits of e^d - d - 1 ~ d^2 / 2 for small |d| (0.8% in float32 at d = -3e-3).

``kl_clamp`` (a hyper-parameter of every built-in loss, default None: off, as TRL) clamps
the per-token estimate to [-kl_clamp, kl_clamp]; a clamped token gets zero gradient from
the KL term. verl clamps its low-variance KL to +-10 (``kl_penalty_forward``, k3 only):
``kl_estimator="k3", kl_clamp=10`` reproduces verl's ``use_kl_loss`` with
``kl_loss_type=low_var_kl``.

Both clamps are the guard ``prepared.clamp_or_nan``: they clamp finite values only, and a
NaN or +-inf estimate (a non-finite log-prob or reference log-prob at a valid token) stays
non-finite, so it cannot become a finite KL term.
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.prepared import LOG_RATIO_GUARD, clamp_or_nan

KL_ESTIMATORS = ("k1", "k2", "k3", "abs", "k1+", "k3+", "abs+")
"""Source of ``abs`` and the ``+`` forms: verl ``trainer/ppo/core_algos.py`` (``kl_penalty``,
``kl_penalty_forward``)."""


def kl_per_token(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str, clamp: float | None = None
) -> torch.Tensor:
    """Per-token KL estimate (B, T), differentiable w.r.t. ``log_probs``, clamped to
    [-clamp, clamp] when ``clamp`` is given."""
    kl = _estimate(log_probs, ref_log_probs, estimator)
    return kl if clamp is None else clamp_or_nan(kl, -clamp, clamp)


def _estimate(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str) -> torch.Tensor:
    d = ref_log_probs - log_probs
    if estimator in ("k1+", "k3+", "abs+"):  # a NaN or +-inf d stays in both value and gradient
        value = _estimate(log_probs, ref_log_probs, estimator[:-1]).detach()
        k2 = 0.5 * d.square()
        return k2 - k2.detach() + value
    if estimator == "abs":
        return d.abs()
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d.square()
    if estimator == "k3":
        d = clamp_or_nan(d, -LOG_RATIO_GUARD, LOG_RATIO_GUARD)
        return torch.expm1(d) - d
    raise ValueError(f"kl_estimator must be one of {list(KL_ESTIMATORS)}, got {estimator!r}")


def reference_kl(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor | None,
    mask: torch.Tensor,
    *,
    beta: float,
    estimator: str,
    loss_name: str,
    clamp: float | None = None,
) -> torch.Tensor | None:
    """Per-token KL (B, T) when a reference is given, None otherwise; exactly 0 where ``mask``
    (B, T) bool is False.

    Both log-probs are replaced by 0 at padding before the estimate (d = 0 there), so that
    whatever padding holds (NaN, +-inf) reaches neither the value nor the gradient: the
    gradient of ``where`` selects, it multiplies nothing by the padding's values.

    Raises ValueError when ``beta > 0`` asks for a KL term but ``ref_log_probs`` is missing.
    """
    if ref_log_probs is None:
        if beta > 0:
            raise ValueError(f"{loss_name}: ref_log_probs is required when kl_beta > 0 (got kl_beta={beta})")
        return None
    zero = torch.zeros((), dtype=log_probs.dtype, device=log_probs.device)
    log_probs = torch.where(mask, log_probs, zero)
    ref_log_probs = torch.where(mask, ref_log_probs, zero)
    return kl_per_token(log_probs, ref_log_probs, estimator, clamp)
