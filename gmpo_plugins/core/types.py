"""The data contract shared by every loss: inputs, batch normalisation context, output.

Shapes (padded layout, B sequences, T response positions):

    log_probs            (B, T) float   current policy log pi_theta(o_t | ...), requires grad
    old_log_probs        (B, T) float   behaviour policy log-probs (detached)
    advantages           (B,) or (B, T) float; sequence-level losses need it constant
                                        over a row's valid tokens
    mask                 (B, T) bool or 0/1; True where a token is a valid response token
    ref_log_probs        (B, T) float, optional: reference policy, for a KL penalty
    rollout_is_weights   (B, T) or (B,) float >= 0, optional: detached importance weights
                                        correcting rollout-engine vs. trainer mismatch; on a
                                        sequence-level loss a (B, T) weight of 0 removes its
                                        token from the row (``core.correction``)
    rollout_log_probs    (B, T) float, optional: the rollout engine's log-probs of the sampled
                                        tokens, read by the correction options (``core.correction``)
    rewards              (B,) float, optional: each sequence's scalar reward (its verifier score
                                        before any advantage estimation), for losses that
                                        split samples by reward (``topr``; ``LossSpec.requires``)
                                        and for the NLL term (``core.terms``)
    entropy              (B, T) float, optional: the current policy's per-token entropy
                                        -sum_v pi(v | ...) log pi(v | ...), differentiable (the
                                        entropy bonus trains through it), for the loss terms
                                        (``core.terms``: ``entropy_coef``, ``top_entropy_quantile``)
    group_ids            (B,) integer, optional: rows with equal ids are one group (the samples
                                        of one prompt), for losses that compare the samples of a
                                        group with each other (``real``; ``LossSpec.requires``)

Values at valid positions must be finite; a NaN or +-inf there (a -inf log-prob included)
gives a non-finite loss and gradient on every path, or a ValueError naming the input with
value checks (``core.prepared``). Masked positions may hold anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

Reduction = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum", "seq-mean-token-sum"]
"""How per-token losses become the micro-batch loss (``core.reduce.reduce_tokens``)."""
Impl = Literal["auto", "eager", "torch", "triton"]
"""Which path computes a built-in loss: ``"eager"`` the unfused formulation (the test oracle),
the others the fused kernels (``core.kernels.dispatch``)."""
Clip = Literal["token", "sequence", "none"]
"""Where the GMPO family clips: per token (gmpo), on the sequence mean (gmpo_seqclip), or not."""

# a count may be fractional: TRL scales its token count by accumulation / steps_per_generation
Count = int | float | torch.Tensor


@dataclass
class LossInputs:
    """Tensors one micro-batch feeds to a loss (see the module docstring for shapes)."""

    log_probs: torch.Tensor
    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    ref_log_probs: torch.Tensor | None = None
    rollout_is_weights: torch.Tensor | None = None
    rollout_log_probs: torch.Tensor | None = None
    rewards: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    group_ids: torch.Tensor | None = None


@dataclass
class BatchInfo:
    """How a micro-batch's loss is scaled so that accumulation and data parallelism are exact.

    A micro-batch loss is ``sum(per-unit losses) / global_count * dp_size``: summed over
    micro-batches and averaged over ``dp_size`` ranks (as DDP/FSDP/DeepSpeed average
    gradients) it equals the mean over the whole global mini-batch.

    dp_size            number of data-parallel ranks whose gradients are averaged.
    global_batch_size  sequences in the global mini-batch (all ranks, all micro-batches).
    global_num_tokens  valid tokens in the global mini-batch.

    When a global count is missing, the micro-batch is taken as an equal shard of the
    global batch: ``global_count = local_count * dp_size``, i.e. a plain local mean.

    Rows without a valid token: a given ``global_batch_size`` is the caller's count, which
    frameworks take over every sequence, such rows included; the local count (no
    ``global_batch_size``) counts only rows with a valid token, as verl's ``agg_loss`` does
    without a global count. Token counts are valid tokens either way.
    """

    dp_size: int = 1
    global_batch_size: Count | None = None
    global_num_tokens: Count | None = None


@dataclass
class LossOutput:
    """A scalar loss to back-propagate and detached scalar tensor metrics.

    Metric keys shared by the built-in losses: ``policy_loss`` (the loss without the KL
    term), ``clip_frac_low``, ``clip_frac_high``, ``clip_frac``, ``ppo_kl`` (mean of
    ``old - new`` log-prob over valid tokens), ``log_ratio_min``, ``log_ratio_max``,
    ``seq_weight_min``, ``seq_weight_mean``, ``seq_weight_max``, ``nonfinite_tokens``
    (valid positions where any input is NaN or +-inf), and
    ``kl`` when a reference policy is given (``core.tail.RATIO_METRIC_KEYS``).

    Non-finite values are reported as they are, never replaced by a number: a NaN or +-inf
    at a valid position of any input makes ``loss`` and its gradient non-finite
    (``core.prepared``'s rule; no exception for a -inf log-prob), and the metrics that
    depend on it NaN or +-inf.
    """

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)
