"""LUSPO (Length-Unbiased Sequence Policy Optimization, arXiv 2602.05261): GSPO's sequence-level
clipped ratio, weighted by the sequence's length.

For sequence i with valid tokens t (|o_i| of them), sequence advantage A_i and rollout IS
weights w_t:

    s_i = exp(sum_t clamp(r_t, -R, R) / |o_i|)        r_t = log pi_theta - log pi_old, R = log_ratio_bound
    g_i = max(-A_i s_i, -A_i clamp(s_i, 1 - eps_low, 1 + eps_high))         (GSPO's surrogate)
    l_t = g_i * w_t                                   (every valid token of i carries g_i)
    L_i = sum_t l_t = |o_i| * g_i                     (without IS weights)

    loss = sum_i L_i / N * dp_size   (+ beta * sum_t KL_t, under the same reduction)

the reduction ``seq-mean-token-sum`` (a sum over each sequence's tokens, a mean over
sequences), which is the method: GSPO's per-sequence mean gives each sequence one vote,
LUSPO's sum weighs it by its length. TRL (``loss_type="luspo"`` with
``importance_sampling_level="sequence"``) computes exactly this, with the KL term and
token-level IS weights inside the per-token loss; Liger divides by B instead of the local
count of sequences. Defaults eps_low = 2e-3, eps_high = 2.5e-3: the LUSPO paper's setting
(section 5.1, as TRL's ``docs/source/paper_index.md`` cites it), not GSPO's 3e-4 / 4e-4 (the
length-weighted sum is not GSPO's mean, and the paper tunes its own band). Shapes: every
tensor (B, T); the advantage is one per sequence ((B,), or (B, T) constant over a row's valid
tokens). ``clip_frac_low/high`` count the tokens of clipped
sequences.
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.per_token import COMMON_DEFAULTS, COMMON_SOURCES, finish_tokens, token_batch
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_SUM
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import empty_loss, is_empty
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput, Reduction


def luspo_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    eps_low: float,
    eps_high: float,
    reduction: Reduction,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """LUSPO (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    t = token_batch(inputs, log_ratio_bound=log_ratio_bound, sequence_level=True)
    ratio = torch.exp(t.guarded.sum(-1) / t.lengths.clamp_min(1))[:, None]  # (B, 1)
    surrogate = torch.maximum(-t.advantages * ratio, -t.advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    return finish_tokens(
        surrogate,
        t,
        inputs,
        batch,
        reduction=reduction,
        kl_beta=kl_beta,
        kl_estimator=kl_estimator,
        kl_clamp=kl_clamp,
        loss_name="luspo",
        clipped_low=(t.advantages < 0) & (ratio < 1.0 - eps_low),
        clipped_high=(t.advantages > 0) & (ratio > 1.0 + eps_high),
    )


_PAPER = "LUSPO paper (arXiv 2602.05261)"

LUSPO = LossSpec(
    name="luspo",
    fn=luspo_loss,
    description="LUSPO: GSPO's clipped sequence ratio, summed over the sequence's tokens (length-weighted)",
    defaults={"eps_low": 2e-3, "eps_high": 2.5e-3, "reduction": SEQ_MEAN_TOKEN_SUM, **COMMON_DEFAULTS},
    sources={
        "eps_low": f"{_PAPER} §5.1, as TRL docs/source/paper_index.md cites it: 2e-3",
        "eps_high": f"{_PAPER} §5.1, as TRL docs/source/paper_index.md cites it: 2.5e-3",
        "reduction": f"{_PAPER}: GSPO's loss weighted by the sequence's length; TRL trainer/grpo_trainer.py (luspo)",
        **COMMON_SOURCES,
    },
    sequence_level=True,
    clip_space="ratio",
    reductions=(SEQ_MEAN_TOKEN_SUM,),  # the length weighting is the method
    formula="L_i = |o_i| * max(-A_i s_i, -A_i clamp(s_i, 1 - eps_low, 1 + eps_high)),  s_i = exp(mean_t r_t)",
    native=("trl:luspo", "liger:luspo"),
)
