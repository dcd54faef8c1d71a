"""Rollout correction: one set of hyper-parameters every registry loss accepts.

The rollout engine (vLLM, SGLang) samples with a policy pi_rollout that differs from the
trainer's. With ``LossInputs.rollout_log_probs`` (B, T) = log pi_rollout of the sampled tokens,
``apply_correction`` turns the options below into the inputs a loss already takes: per-token
importance weights ``rollout_is_weights`` (B, T) and, where a token leaves the loss, the
``mask``. It runs in ``LossSpec.__call__`` before the loss, so no loss module knows about it.

With d_t = a_t - log pi_rollout_t, the anchor a = ``old_log_probs`` (the trainer's policy at
rollout time, verl's decoupled mode, TRL, OpenRLHF) or, with ``rollout_bypass``, the current
``log_probs`` detached (verl's bypass mode):

    rollout_bypass   old_log_probs := rollout_log_probs: the loss's own ratio is anchored at the
                     rollout policy. verl's bypass ``loss_type="ppo_clip"`` is any clipped loss
                     (``grpo``, ``dapo``, ...) with this option and no ``rollout_is`` (verl applies
                     no IS weight there: the ratio already is pi / pi_rollout); its REINFORCE form
                     ``loss_type="reinforce"``, l_t = -w_t A_t log pi_t, is ``gpg`` with this option
                     and ``rollout_is`` (w = pi / pi_rollout, truncated or masked, detached).
    rollout_is       None (off), "token": log w_t = d_t; "sequence": one weight per row,
                     log w_i = sum_t d_t (``rollout_is_sequence="product"``, verl and TRL) or
                     mean_t d_t ("geometric_mean", OpenRLHF's seq level, SkyRL's geometric
                     metric); w = exp(clamp(log w, -20, 20)) (verl's safety bound).
    rollout_is_mode  "truncate" (TIS): w := clamp(w, lo, hi);  "mask" (masked IS / IcePop):
                     w := 0 outside [lo, hi] (a token, or at sequence level the whole row).
    rollout_is_threshold      hi, default 2.0 (verl's)
    rollout_is_threshold_low  lo, default None: no lower bound (TRL's ``clip_min=None``)
    rollout_is_batch_normalize  w := w / mean(w) over the micro-batch's valid tokens (token) or
                     rows (sequence), as verl's ``rollout_is_batch_normalize``: NOT split-invariant
                     (the mean is the micro-batch's; verl takes it over the ranks' batch).
    rollout_rs       rejection by a divergence, verl's ``rollout_rs`` options: "token_k1",
                     "token_k2", "token_k3" per token; "seq_sum_k1..3", "seq_mean_k1..3",
                     "seq_max_k2", "seq_max_k3" per row, with (d' = clamp(d, -20, 20))
                     k1 = -d', k2 = d'^2 / 2, k3 = e^d' - 1 - d'. A unit is rejected when its
                     statistic exceeds ``rollout_rs_threshold``; for k1 (a log ratio) when it
                     leaves [log lo, log hi], lo = ``rollout_rs_threshold_low`` (default 1 / hi).
    off_policy_mask_threshold  TRL's off-policy sequence mask (DeepSeek-V3.2): row i is masked
                     when A_i < 0 and mean_t (log pi_rollout_t - log pi_theta_t) > threshold
                     (pi_theta detached; ``old_log_probs`` stand in for the rollout log-probs
                     when none are given, as TRL without vLLM).
    rollout_mask_count  what a masked token leaves (below): "keep" (default) or "drop".

Masks. A masked token gets weight 0: it is removed from the loss (its term and its gradient
are 0) and from its row's sequence aggregate. A row is removed only by a sequence-level
mode (``rollout_is="sequence"`` with "mask", a ``seq_*`` rejection, the off-policy mask).
The normalisation count: with ``rollout_mask_count="keep"`` (the default; verl's IcePop
weights, TRL's and OpenRLHF's masks and SkyRL's multiply the loss by 0) a masked token stays
in the token counts a token-level reduction divides by (its weight is 0, its mask bit stays),
and a masked row stays in the sequence count; with "drop" (verl's ``rollout_rs``, which edits
the response mask) masked tokens and rows leave ``mask`` itself, so a local count no longer
counts them (a global count in ``BatchInfo`` is whatever the caller counted).

The zero-weight rule, for computed and precomputed (``LossInputs.rollout_is_weights``) weights
alike: on a sequence-level loss a valid token whose (B, T) weight is exactly 0 leaves the
``mask``, so the loss's own row aggregate (GMPO's geometric mean, GSPO's ratio, their length
|o_i|) and the IS aggregate ``rollout_is_aggregation`` run over the row's other tokens; a row
whose weights are all 0 keeps its tokens and trains nothing (rho_i = 0) while staying in the
count. On a token-level loss a zero weight zeros the token's term (and leaves the mask under
"drop").

Weights are detached and are 1 where no option acts. Precomputed weights and the computed
ones multiply; ``rollout_is`` with precomputed weights is refused (two IS weights).

Non-finite values: d_t is not cleaned. A NaN or +-inf rollout log-prob (or anchor) at a valid
token makes that token's weight NaN, whatever the options (also with none: the weight is then
1 + (x - x)), a band or a threshold never turns NaN into a kept or dropped token (a unit is
rejected only by a comparison that holds), so the loss and its gradient are non-finite.

Metrics (``CORRECTION_METRIC_KEYS``, detached 0-dim, no synchronisation), reported whenever
``rollout_log_probs`` is given or an option is on:

    rollout_token_masked_frac     valid tokens masked by any option, over valid tokens
    rollout_seq_masked_frac       rows (with a valid token) whose every valid token is masked
    rollout_token_truncated_frac  valid tokens whose IS weight was truncated (a truncated row's
                                  tokens at sequence level)
    rollout_seq_truncated_frac    rows whose sequence weight was truncated (sequence level)
    rollout_weight_min/mean/max   the correction weight over valid unmasked tokens (0 without any)
    rollout_divergence            mean of the ``rollout_rs`` statistic over its units (tokens or
                                  rows with a valid token; 0 without ``rollout_rs``)
    rollout_kl                    mean over valid tokens of log pi_rollout - a (k1 of
                                  KL(pi_rollout || anchor); 0 without rollout log-probs)

Split invariance: every option reads one token or one row, so any split of a batch gives the
whole batch's weights and masks, except ``rollout_is_batch_normalize`` (declared above).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from gmpo_plugins.core.prepared import LOG_RATIO_GUARD, clamp_or_nan
from gmpo_plugins.core.reduce import as_bool_mask, masked_mean, masked_sum
from gmpo_plugins.core.types import LossInputs

IS_LEVELS = ("token", "sequence")
IS_MODES = ("truncate", "mask")
IS_SEQUENCE = ("product", "geometric_mean")
MASK_COUNTS = ("keep", "drop")
RS_OPTIONS = (
    *("token_k1", "token_k2", "token_k3"),
    *("seq_sum_k1", "seq_sum_k2", "seq_sum_k3"),
    *("seq_mean_k1", "seq_mean_k2", "seq_mean_k3"),
    *("seq_max_k2", "seq_max_k3"),
)

CORRECTION_DEFAULTS: dict[str, Any] = {
    "rollout_bypass": False,
    "rollout_is": None,
    "rollout_is_mode": "truncate",
    "rollout_is_threshold": 2.0,
    "rollout_is_threshold_low": None,
    "rollout_is_sequence": "product",
    "rollout_is_batch_normalize": False,
    "rollout_rs": None,
    "rollout_rs_threshold": None,
    "rollout_rs_threshold_low": None,
    "off_policy_mask_threshold": None,
    "rollout_mask_count": "keep",
}
"""The correction hyper-parameters every registry loss accepts (module docstring), all off."""

_VERL_RC = "verl trainer/config/algorithm/rollout_correction.yaml"
CORRECTION_SOURCES: dict[str, str] = {
    "rollout_bypass": f"off, as {_VERL_RC} bypass_mode false",
    "rollout_is": f"off, as {_VERL_RC} rollout_is null",
    "rollout_is_mode": "truncate (TIS), as verl trainer/ppo/rollout_corr_helper.py (weights clamped to the threshold)",
    "rollout_is_threshold": f"{_VERL_RC} rollout_is_threshold 2.0",
    "rollout_is_threshold_low": "no lower bound, as TRL trainer/grpo_config.py vllm_importance_sampling_clip_min None",
    "rollout_is_sequence": "product (exp of the summed log ratios), as verl trainer/ppo/rollout_corr_helper.py",
    "rollout_is_batch_normalize": f"off, as {_VERL_RC} rollout_is_batch_normalize false",
    "rollout_rs": f"off, as {_VERL_RC} rollout_rs null",
    "rollout_rs_threshold": f"None, as {_VERL_RC} rollout_rs_threshold null",
    "rollout_rs_threshold_low": "1 / threshold, as verl trainer/ppo/rollout_corr_helper.py",
    "off_policy_mask_threshold": "off, as TRL trainer/grpo_config.py off_policy_mask_threshold None",
    "rollout_mask_count": "keep, as verl's IcePop weights and TRL's, OpenRLHF's and SkyRL's masks (the loss times 0)",
}
"""Where each of ``CORRECTION_DEFAULTS`` comes from."""

CORRECTION_OPTIONS: dict[str, str] = {
    "rollout_bypass": "old_log_probs := rollout_log_probs (verl bypass_mode)",
    "rollout_is": "None, token or sequence: IS weight pi_anchor / pi_rollout, detached",
    "rollout_is_mode": "truncate (TIS: clamp to [lo, hi]) or mask (IcePop: 0 outside [lo, hi])",
    "rollout_is_threshold": "hi, a number > 0",
    "rollout_is_threshold_low": "lo, None (no lower bound) or a number in (0, hi]",
    "rollout_is_sequence": "product (sum of log ratios) or geometric_mean (their mean)",
    "rollout_is_batch_normalize": "divide the weights by their micro-batch mean (split-dependent)",
    "rollout_rs": f"None or one of {', '.join(RS_OPTIONS)}: reject by a divergence",
    "rollout_rs_threshold": "upper bound of the rejection statistic (k1: of the ratio)",
    "rollout_rs_threshold_low": "k1 only: lower ratio bound (None: 1 / threshold)",
    "off_policy_mask_threshold": "None or a number: mask rows with A < 0 and mean(rollout - new) above it",
    "rollout_mask_count": "keep (masked tokens stay in the counts) or drop (they leave the mask)",
}
"""One line per option, for ``gmpo-plugins list --corrections`` and docs/losses.md."""

SPLIT_DEPENDENT = ("rollout_is_batch_normalize",)
"""Options whose result depends on the micro-batch given (declared, and tested as such)."""

CORRECTION_METRIC_KEYS = (
    "rollout_token_masked_frac",
    "rollout_seq_masked_frac",
    "rollout_token_truncated_frac",
    "rollout_seq_truncated_frac",
    "rollout_weight_min",
    "rollout_weight_mean",
    "rollout_weight_max",
    "rollout_divergence",
    "rollout_kl",
)


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and -math.inf < value < math.inf


def _positive_or_none(value: Any) -> bool:
    return value is None or (_real(value) and value > 0)


_CHECKS: dict[str, tuple[Any, str]] = {
    "rollout_bypass": (lambda v: isinstance(v, bool), "True or False"),
    "rollout_is": (lambda v: v is None or v in IS_LEVELS, f"None or one of {list(IS_LEVELS)}"),
    "rollout_is_mode": (lambda v: v in IS_MODES, f"one of {list(IS_MODES)}"),
    "rollout_is_threshold": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "rollout_is_threshold_low": (_positive_or_none, "None or a finite number > 0"),
    "rollout_is_sequence": (lambda v: v in IS_SEQUENCE, f"one of {list(IS_SEQUENCE)}"),
    "rollout_is_batch_normalize": (lambda v: isinstance(v, bool), "True or False"),
    "rollout_rs": (lambda v: v is None or v in RS_OPTIONS, f"None or one of {list(RS_OPTIONS)}"),
    "rollout_rs_threshold": (_positive_or_none, "None or a finite number > 0"),
    "rollout_rs_threshold_low": (_positive_or_none, "None or a finite number > 0"),
    "off_policy_mask_threshold": (lambda v: v is None or _real(v), "None or a finite number"),
    "rollout_mask_count": (lambda v: v in MASK_COUNTS, f"one of {list(MASK_COUNTS)}"),
}


@dataclass(frozen=True)
class Correction:
    """The correction options of one call (``CORRECTION_DEFAULTS``, module docstring)."""

    rollout_bypass: bool = False
    rollout_is: str | None = None
    rollout_is_mode: str = "truncate"
    rollout_is_threshold: float = 2.0
    rollout_is_threshold_low: float | None = None
    rollout_is_sequence: str = "product"
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: float | None = None
    rollout_rs_threshold_low: float | None = None
    off_policy_mask_threshold: float | None = None
    rollout_mask_count: str = "keep"

    @property
    def active(self) -> bool:
        """True when an option changes anything (``rollout_mask_count`` alone acts on zero weights)."""
        return self != Correction(rollout_mask_count=self.rollout_mask_count)

    @property
    def needs_rollout(self) -> bool:
        """True when an option reads ``rollout_log_probs`` (the off-policy mask falls back on old)."""
        return self.rollout_bypass or self.rollout_is is not None or self.rollout_rs is not None


def split_correction(params: Mapping[str, Any]) -> tuple[Correction, dict[str, Any]]:
    """(the ``Correction`` of ``params``, the loss's own hyper-parameters): the correction keys
    taken out of ``params`` (already checked by ``LossSpec.resolve``)."""
    options = {key: value for key, value in params.items() if key in CORRECTION_DEFAULTS}
    rest = {key: value for key, value in params.items() if key not in CORRECTION_DEFAULTS}
    return Correction(**options), rest


def check_correction(loss_name: str, options: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first correction option whose value is out of range (module
    docstring), without touching a tensor."""
    for name, value in options.items():
        check, expected = _CHECKS[name]
        if not check(value):
            raise ValueError(f"{loss_name}: {name} must be {expected}, got {value!r}")
    merged = {**CORRECTION_DEFAULTS, **options}
    low, high = merged["rollout_is_threshold_low"], merged["rollout_is_threshold"]
    if low is not None and low > high:
        raise ValueError(
            f"{loss_name}: rollout_is_threshold_low must be <= rollout_is_threshold, got {low!r} > {high!r}"
        )
    if merged["rollout_rs"] is not None and merged["rollout_rs_threshold"] is None:
        raise ValueError(f"{loss_name}: rollout_rs_threshold is required with rollout_rs={merged['rollout_rs']!r}")
    if merged["rollout_rs_threshold_low"] is not None and not str(merged["rollout_rs"]).endswith("k1"):
        raise ValueError(
            f"{loss_name}: rollout_rs_threshold_low bounds a ratio and applies to the k1 options only, "
            f"got rollout_rs={merged['rollout_rs']!r}"
        )


def check_correction_inputs(loss_name: str, correction: Correction, inputs: LossInputs) -> None:
    """ValueError naming ``rollout_log_probs`` or ``rollout_is_weights`` when the options cannot
    run on ``inputs`` (no tensor is read)."""
    if correction.needs_rollout and inputs.rollout_log_probs is None:
        raise ValueError(
            f"{loss_name}: rollout_log_probs (B, T) is required with rollout_bypass, rollout_is or rollout_rs "
            "(the rollout engine's log-probs of the sampled tokens)"
        )
    if correction.rollout_is is not None and inputs.rollout_is_weights is not None:
        raise ValueError(
            f"{loss_name}: rollout_is_weights and rollout_is={correction.rollout_is!r} are two IS weights; "
            "pass the precomputed weights or the rollout log-probs with rollout_is, not both"
        )


def _divergence(option: str, d: torch.Tensor) -> torch.Tensor:
    d = clamp_or_nan(d, -LOG_RATIO_GUARD, LOG_RATIO_GUARD)
    if option.endswith("k1"):
        return -d
    if option.endswith("k2"):
        return 0.5 * d.square()
    return torch.expm1(d) - d


def _rejected(
    option: str, high: float, low: float | None, d: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rejected (B, T) bool, the mean statistic over its units) for ``rollout_rs`` ``option``
    with thresholds ``high`` and (k1) ``low``."""
    stat = _divergence(option, d)
    rows = mask.any(-1)
    if option.startswith("seq_sum"):
        stat = masked_sum(stat, mask, dim=-1)
    elif option.startswith("seq_mean"):
        stat = masked_mean(stat, mask, dim=-1)
    elif option.startswith("seq_max"):
        stat = torch.where(mask, stat, -torch.inf).amax(-1)
        stat = torch.where(rows, stat, 0.0)
    if option.endswith("k1"):  # a log ratio: the band [log lo, log hi]
        low_log = -math.log(high) if low is None else math.log(low)
        outside = (stat > math.log(high)) | (stat < low_log)
    else:
        outside = stat > high
    if option.startswith("token"):
        return outside & mask, masked_mean(stat, mask)
    return outside[:, None] & mask, masked_mean(stat, rows)


@dataclass
class _Weights:
    weights: torch.Tensor  # (B, T) detached, 1 where nothing acts
    masked: torch.Tensor  # (B, T) bool, valid tokens masked
    truncated: torch.Tensor  # (B, T) bool, valid tokens whose IS weight was truncated
    seq_truncated: torch.Tensor  # (B,) bool
    divergence: torch.Tensor  # ()


def _is_weights(correction: Correction, d: torch.Tensor, mask: torch.Tensor) -> _Weights:
    """The IS weight of every valid token (module docstring), masks not yet applied."""
    rows = mask.any(-1)
    no = torch.zeros_like(mask)
    if correction.rollout_is is None:
        return _Weights(torch.ones_like(d), no, no, torch.zeros_like(rows), d.new_zeros(()))
    if correction.rollout_is == "token":
        log_w = d
    elif correction.rollout_is_sequence == "product":
        log_w = masked_sum(d, mask, dim=-1)[:, None].expand_as(d)
    else:
        log_w = masked_mean(d, mask, dim=-1)[:, None].expand_as(d)
    raw = torch.exp(clamp_or_nan(log_w, -LOG_RATIO_GUARD, LOG_RATIO_GUARD))
    high, low = correction.rollout_is_threshold, correction.rollout_is_threshold_low
    outside = raw > high
    if low is not None:
        outside = outside | (raw < low)
    outside = outside & mask
    if correction.rollout_is_mode == "truncate":
        weights, truncated, masked = raw.clamp(low, high), outside, no
    else:
        weights, truncated, masked = torch.where(outside, 0.0, raw), no, outside
    if correction.rollout_is_batch_normalize:
        if correction.rollout_is == "token":
            mean = masked_mean(weights, mask)
        else:
            mean = masked_mean(masked_mean(weights, mask, dim=-1), rows)
        weights = weights / mean.clamp_min(torch.finfo(weights.dtype).tiny)
    seq_truncated = truncated.any(-1) if correction.rollout_is == "sequence" else torch.zeros_like(rows)
    return _Weights(weights, masked, truncated, seq_truncated, d.new_zeros(()))


def _off_policy_rows(threshold: float, inputs: LossInputs, log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: the tokens of the rows TRL's off-policy sequence mask drops."""
    sampled = inputs.rollout_log_probs if inputs.rollout_log_probs is not None else inputs.old_log_probs
    gap = masked_mean(sampled.detach().to(log_probs.dtype) - log_probs, mask, dim=-1)
    advantages = inputs.advantages.detach().to(log_probs.dtype)
    if advantages.dim() == 2:
        advantages = masked_mean(advantages, mask, dim=-1)
    drop = (advantages < 0) & (gap > threshold)
    return drop[:, None] & mask


def _metrics(w: _Weights, weights: torch.Tensor, mask: torch.Tensor, kl: torch.Tensor) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        dtype = weights.dtype
        rows = mask.any(-1)
        kept = mask & ~w.masked
        values = torch.stack(
            (
                masked_mean(w.masked.to(dtype), mask),
                masked_mean((rows & ~kept.any(-1)).to(dtype), rows),
                masked_mean(w.truncated.to(dtype), mask),
                masked_mean(w.seq_truncated.to(dtype), rows),
                torch.where(kept.any(), torch.where(kept, weights, torch.inf).amin(), 0.0),
                masked_mean(weights, kept),
                torch.where(kept.any(), torch.where(kept, weights, -torch.inf).amax(), 0.0),
                w.divergence.to(dtype),
                kl.to(dtype),
            )
        )
        return dict(zip(CORRECTION_METRIC_KEYS, values.unbind(0), strict=True))


def apply_correction(
    inputs: LossInputs, correction: Correction, *, sequence_level: bool
) -> tuple[LossInputs, dict[str, torch.Tensor]]:
    """(the inputs the loss runs on, the correction metrics): ``inputs`` with the options applied
    (weights, mask, bypass) and the zero-weight rule (module docstring). ``inputs`` itself and no
    metrics when there is nothing to do; shapes as ``LossInputs``. No synchronisation."""
    rollout = inputs.rollout_log_probs
    reports = rollout is not None or correction.active
    if inputs.log_probs.numel() == 0 or not (reports or _has_token_weights(inputs)):
        return inputs, {}
    mask = as_bool_mask(inputs.mask)
    drop = correction.rollout_mask_count == "drop"
    if not reports:  # precomputed (B, T) weights only: the zero-weight rule
        new_mask = _zero_weight_mask(inputs.rollout_is_weights, mask, sequence_level=sequence_level, drop=drop)
        return (inputs if new_mask is mask else replace(inputs, mask=new_mask)), {}
    dtype = torch.promote_types(inputs.log_probs.dtype, torch.float32)
    log_probs = inputs.log_probs.detach().to(dtype)
    old = rollout if correction.rollout_bypass and rollout is not None else inputs.old_log_probs
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    anchor = log_probs if correction.rollout_bypass else old.detach().to(dtype)
    if rollout is None:
        d = torch.zeros_like(log_probs)
    else:  # 0 at padding, raw (non-finite kept) at valid tokens
        d = torch.where(mask, anchor - rollout.detach().to(dtype), zero)
    w = _is_weights(correction, d, mask)
    if correction.rollout_rs is not None and correction.rollout_rs_threshold is not None:  # both or neither
        rejected, w.divergence = _rejected(
            correction.rollout_rs, correction.rollout_rs_threshold, correction.rollout_rs_threshold_low, d, mask
        )
        w.masked = w.masked | rejected
    if correction.off_policy_mask_threshold is not None:
        w.masked = w.masked | _off_policy_rows(correction.off_policy_mask_threshold, inputs, log_probs, mask)
    weights = torch.where(w.masked, 0.0, w.weights) + (d - d)  # NaN where d is not finite
    metrics = _metrics(w, weights, mask, -masked_mean(d, mask))
    given = inputs.rollout_is_weights
    if given is not None:
        given = given.detach().to(dtype)
        weights = weights * (given if given.dim() == 2 else given[:, None])
    new_mask = _zero_weight_mask(weights, mask, sequence_level=sequence_level, drop=drop)
    corrected = replace(
        inputs, old_log_probs=old, mask=inputs.mask if new_mask is mask else new_mask, rollout_is_weights=weights
    )
    return corrected, metrics


def zero_weight_rule(inputs: LossInputs, correction: Correction, *, sequence_level: bool) -> LossInputs:
    """``inputs`` with the zero-weight rule (module docstring) applied to its (B, T)
    ``rollout_is_weights`` under ``correction.rollout_mask_count``, for weights set after
    ``apply_correction`` (the top-entropy mask, ``core.terms``); ``inputs`` itself when the
    mask is unchanged."""
    mask = as_bool_mask(inputs.mask)
    drop = correction.rollout_mask_count == "drop"
    new_mask = _zero_weight_mask(inputs.rollout_is_weights, mask, sequence_level=sequence_level, drop=drop)
    return inputs if new_mask is mask else replace(inputs, mask=new_mask)


def _has_token_weights(inputs: LossInputs) -> bool:
    return inputs.rollout_is_weights is not None and inputs.rollout_is_weights.dim() == 2


def _zero_weight_mask(
    weights: torch.Tensor | None, mask: torch.Tensor, *, sequence_level: bool, drop: bool
) -> torch.Tensor:
    """The mask after the zero-weight rule (module docstring): ``mask`` itself when it is unchanged."""
    if weights is None or weights.dim() != 2 or not (sequence_level or drop):
        return mask
    zero = mask & (weights == 0)  # NaN is not 0: a non-finite weight stays and poisons the loss
    if drop:
        return mask & ~zero
    nonzero_rows = (mask & ~zero).any(-1, keepdim=True)  # a row of zeros keeps its tokens: rho_i = 0
    return mask & ~(zero & nonzero_rows)
