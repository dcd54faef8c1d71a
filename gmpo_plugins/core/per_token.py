"""The shared steps of the losses written as a per-token loss l_t (B, T) and a token reduction:
cispo, sapo, gpg, dro, dppo_tv, dppo_kl, clip_cov, kl_cov, luspo and vespo.

    tokens = token_batch(inputs, ...)      every (B, T) input replaced by 0 at padding first
    l      = the loss's own formula on ``tokens``        (B, T)
    out    = finish_tokens(l, tokens, ...)  S_i = sum_t m_t l_t, the reduction's row weights,
                                            the KL term and the metrics (``tail.finish``)

Padding: each (B, T) input goes through ``where(mask, x, 0)`` before anything is computed
from it, so whatever a masked position holds reaches neither the value nor the gradient
(the gradient of ``where`` selects, it multiplies nothing by the padding's values).

Non-finite values at valid positions: the log-ratio guard is the shared ``clamp_or_nan``
(finite values clamped, NaN and +-inf made NaN), and ``tail.finish`` applies the non-finite
rule (``prepared``), so such an input always gives a non-finite loss and gradient, also where
the formula does not read that input (gpg never reads old_log_probs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gmpo_plugins.core.prepared import LOG_RATIO_GUARD, clamp_or_nan, prepare, token_is_weights
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM, TOKEN_MEAN, TOKEN_SUM, masked_sum
from gmpo_plugins.core.tail import eager_row_stats, finish, kl_rows
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction

TOKEN_REDUCTIONS: tuple[Reduction, ...] = (TOKEN_MEAN, SEQ_MEAN_TOKEN_MEAN, TOKEN_SUM, SEQ_MEAN_TOKEN_SUM)
"""The reductions the per-token losses accept. ``seq-mean-token-sum-norm`` is Dr.GRPO's
constant-length reduction (``dr_grpo``, ``grpo``), kept out so that these losses need no
``norm_length``."""

COMMON_DEFAULTS: dict[str, object] = {
    "kl_beta": 0.0,
    "kl_estimator": "k3",
    "kl_clamp": None,
    "log_ratio_bound": LOG_RATIO_GUARD,
}
"""The hyper-parameters every per-token loss takes besides its own: the KL term and the guard."""

COMMON_SOURCES: dict[str, str] = {
    "kl_beta": "off, as TRL trainer/grpo_config.py beta 0.0 and verl trainer/config/actor/actor.yaml use_kl_loss false",
    "kl_estimator": "k3, TRL trainer/grpo_trainer.py's per_token_kl and verl actor.yaml kl_loss_type low_var_kl",
    "kl_clamp": "None, as TRL's KL (no clamp); verl clamps low_var_kl to +-10 (core_algos.py kl_penalty_forward)",
    "log_ratio_bound": "verl trainer/ppo/core_algos.py: the log ratio is clamped to +-20 before exp",
}
"""Where each of ``COMMON_DEFAULTS`` comes from (``LossSpec.sources``)."""


@dataclass
class TokenBatch:
    """One micro-batch in compute dtype, every (B, T) tensor 0 at padding.

    log_probs   (B, T) log pi_theta, differentiable
    log_ratio   (B, T) log pi_theta - log pi_old (raw: non-finite valid values kept)
    guarded     (B, T) ``log_ratio`` clamped to +-log_ratio_bound (``clamp_or_nan``: NaN where not finite)
    advantages  (B, T) per token (a (B,) advantage broadcast; sequence-level losses: the
                row's advantage on every valid token)
    weights     (B, T) rollout IS weights per token, or None
    mask        (B, T) bool
    lengths     (B,) valid tokens per row
    row_advantages  (B,) one advantage per row (sequence-level losses; 0 on an empty row), or None
    """

    log_probs: torch.Tensor
    log_ratio: torch.Tensor
    guarded: torch.Tensor
    advantages: torch.Tensor
    weights: torch.Tensor | None
    mask: torch.Tensor
    lengths: torch.Tensor
    row_advantages: torch.Tensor | None = None


def token_batch(inputs: LossInputs, *, log_ratio_bound: float, sequence_level: bool = False) -> TokenBatch:
    """``TokenBatch`` of ``inputs`` (module docstring); ``sequence_level`` takes one advantage
    per row (``prepare``) and broadcasts it over the row's tokens."""
    p = prepare(inputs, sequence_level=sequence_level)
    mask = p.mask
    zero = torch.zeros((), dtype=p.log_ratio.dtype, device=p.log_ratio.device)
    advantages = p.advantages[:, None].expand_as(mask) if sequence_level else p.advantages
    weights = token_is_weights(p)
    return TokenBatch(
        log_probs=torch.where(mask, p.log_probs, zero),
        log_ratio=p.log_ratio,
        guarded=clamp_or_nan(p.log_ratio, -log_ratio_bound, log_ratio_bound),
        advantages=torch.where(mask, advantages, zero),
        weights=None if weights is None else torch.where(mask, weights, zero),
        mask=mask,
        lengths=p.lengths,
        row_advantages=p.advantages if sequence_level else None,
    )


def finish_tokens(
    token_loss: torch.Tensor,
    tokens: TokenBatch,
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    loss_name: str,
    clipped_low: torch.Tensor | None = None,
    clipped_high: torch.Tensor | None = None,
    extra: dict[str, torch.Tensor] | None = None,
    weigh: bool = True,
) -> LossOutput:
    """The ``LossOutput`` of a per-token loss (B, T) under ``reduction`` (``reduce.row_weights``):
    l_t times the rollout IS weight w_t (``weigh``; vespo folds w_t into its own weight), the KL
    term under the same reduction, the shared metrics (``clipped_low`` / ``clipped_high``: bool
    (B, T) tokens counted in ``clip_frac_low`` / ``clip_frac_high``; None: none) and the
    non-finite rule (``tail.finish``)."""
    mask = tokens.mask
    if weigh and tokens.weights is not None:
        token_loss = token_loss * tokens.weights
    none = torch.zeros_like(mask)
    low = none if clipped_low is None else clipped_low
    high = none if clipped_high is None else clipped_high
    dtype = tokens.log_ratio.dtype
    kl = kl_rows(
        inputs, mask, dtype, kl_beta=kl_beta, kl_estimator=kl_estimator, kl_clamp=kl_clamp, loss_name=loss_name
    )
    return finish(
        masked_sum(token_loss, mask, dim=-1),
        eager_row_stats(tokens.log_ratio, mask, low, high),
        batch,
        inputs=inputs,
        reduction=reduction,
        kl=kl,
        kl_beta=kl_beta,
        extra=extra,
    )
