"""The conventions a framework's loss may differ from the registry by: data, one entry each.

A convention is a name, one sentence saying what the framework does differently, and either
how the registry reproduces it (its hyper-parameters ``core_hparams``, or the sequence count
``count_empty_rows``) or where it acts (``batches``: only on those audit batches;
``value_only``: on the loss value, never the gradient). A cell that differs from the registry
is "differs by a named convention" only when its translation (``translations.py``) names the
convention, and it is ``verified`` when the registry, set as the modelled conventions say,
matches the framework within the tolerance wherever the other named conventions do not act;
when every named convention is modelled and the registry still differs, the cell is
"differs".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Convention:
    """One named convention.

    Args:
        name: short identifier, quoted in the table and the docs.
        explanation: one sentence: what the framework does and what the registry does.
        core_hparams: registry hyper-parameters that reproduce it (empty: not modelled).
        count_empty_rows: False when the framework leaves rows without a valid token out of
            the sequence count a sequence mean divides by (the registry counts every row).
        batches: the audit batches an unmodelled convention acts on (empty: all of them).
        value_only: an unmodelled convention that changes the loss value, never the gradient.
        splits: the splits (``Split.label``) on whose micro-batches an unmodelled convention acts
            on every batch; a per-micro-batch loss is not compared with the registry there.
    """

    name: str
    explanation: str
    core_hparams: Mapping[str, Any] = field(default_factory=dict)
    count_empty_rows: bool = True
    batches: tuple[str, ...] = ()
    value_only: bool = False
    splits: tuple[str, ...] = ()

    @property
    def modelled(self) -> bool:
        """Whether the registry can be set to reproduce this convention."""
        return bool(self.core_hparams) or not self.count_empty_rows


_ALL = (
    Convention(
        "no_overflow_guard",
        "The framework exponentiates each token's log ratio as it is; the registry bounds it at +-20 "
        "(log_ratio_bound) first, which changes rows with a log ratio beyond 20 (the guard batch).",
        core_hparams={"log_ratio_bound": 60.0},
    ),
    Convention(
        "sequence_log_ratio_clamp_10",
        "The framework clamps the log sequence ratio at +10 (no lower bound) where the registry bounds each "
        "token's log ratio at +-20, which changes a row whose mean log ratio exceeds 10 (the guard batch).",
        batches=("guard",),
    ),
    Convention(
        "empty_rows_not_counted",
        "The framework's sequence mean divides by the number of rows with a valid token; the registry divides by "
        "every row of the batch (BatchInfo.global_batch_size), empty rows included.",
        count_empty_rows=False,
    ),
    Convention(
        "empty_row_constant",
        "The framework gives a row without a valid token the constant -A_i (exp of an empty mean) in its mean "
        "over rows; the registry gives it 0 (loss value only, the gradient is equal).",
        value_only=True,
    ),
    Convention(
        "sapo_reduction_fixed",
        "The framework's sapo reduces by seq-mean-token-mean whatever its loss_agg_mode says; the registry "
        "reduces by its reduction, seq-mean-token-mean by default.",
        core_hparams={"reduction": "seq-mean-token-mean"},
    ),
    Convention(
        "dppo_value_form",
        "The framework's loss value is -A * r * M (PPO's surrogate, masked) where the registry's is "
        "-A * sg(r) * log p * M (the REINFORCE form); the gradients are equal (loss value only).",
        value_only=True,
    ),
    Convention(
        "random_candidates",
        "The framework restrains k tokens drawn at random (torch.randperm) among those whose covariance lies in "
        "(clip_cov_lb, clip_cov_ub); the registry takes the k largest covariances (the audit seeds each call, so "
        "its verdict rests on one seeded draw).",
    ),
    Convention(
        "clamp_stops_gradient",
        "The framework clamps the log ratio at +-20 inside the graph, so a token beyond the bound gets no "
        "gradient; the registry's weight there is e^20, detached, and the token keeps the gradient -A * e^20 "
        "(the guard batch).",
        batches=("guard",),
    ),
    Convention(
        "binary_kl_nan_kept",
        "Where a log-prob is above 0 (not a probability: the near, far and guard batches) the binary KL is NaN; "
        "the framework keeps such a token (it masks where KL > delta) and the registry masks it (it keeps where "
        "KL <= delta), as verl does.",
        batches=("near", "far", "guard"),
    ),
    Convention(
        "shifted_log_probs",
        "The audit reaches Liger-Kernel through hidden states whose log-probs are shifted below 0 (the ratio is "
        "kept), which changes the value of a loss that carries log pi itself (-w * A * log pi), never its gradient.",
        value_only=True,
    ),
    Convention(
        "covariance_ties",
        "The framework picks kl_cov's tokens with torch.topk, whose choice among equal covariances is unspecified; "
        "the registry takes the lowest flat index; it matters where a micro-batch's valid tokens share one "
        "advantage (the zero_adv batch, and at 4 micro-batches the one whose other row is empty).",
        batches=("zero_adv",),
        splits=("4 micro-batches",),
    ),
    Convention(
        "prescaled_advantages",
        "The framework reduces by pre-scaling the advantages (A / valid tokens) and summing, so the covariance "
        "sees the scaled advantages (clip_cov's bounds select other tokens) and kl_cov's penalty "
        "ppo_kl_coef * |log r| is summed, not averaged; the registry computes both on the advantages as given.",
    ),
)

CONVENTIONS: dict[str, Convention] = {convention.name: convention for convention in _ALL}
