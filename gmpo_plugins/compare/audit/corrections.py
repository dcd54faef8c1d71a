"""The audit of rollout corrections: each framework's own correction code against the registry's
(``core.correction``), one verdict per (correction setting, framework).

A row is one setting, written once as the registry's correction options (``CORRECTION_ROWS``);
``CORRECTION_TRANSLATIONS[framework][row]`` is the same setting in the framework's own config
(a row without an entry is "not shipped": the framework has no setting for it). A framework's
caller module takes part by defining ``correction(settings, old_log_probs, rollout_log_probs,
mask)``, which runs the framework's own correction code and returns, per token (B, T):

    factor   what multiplies the token's term of the loss: the IS weight (1 without one) where
             the token is kept, 0 where a mask or a rejection removed it
    counted  whether the token stays in the count a token-level reduction divides by

The registry's side is ``apply_correction`` on a token-level loss, the same two tensors from its
``rollout_is_weights`` and ``mask``. The batches are the audit's hard batches
(``batches.audit_cases``, float64) with rollout log-probs ``rollout_log_probs(case)``: the old
log-probs moved by a fixed draw, N(0, 0.3) per token, and by +-2.5 on every seventh token, so
that every row's thresholds act on some tokens and rows.

Verdict per cell, over the valid tokens of every batch:

    identical   the factors agree within ``TOLERANCE`` (relative to max(1, |factor|)) and the
                same tokens are counted
    differs     otherwise: the largest factor difference and the tokens counted differently
                are reported

``acted`` is the share of valid tokens the registry's correction masked, rejected or truncated
(its ``rollout_token_masked_frac`` and ``rollout_token_truncated_frac``): a row that acts on no
token, or on every one, would hold little against the framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from gmpo_plugins.compare.audit.batches import audit_cases
from gmpo_plugins.compare.audit.callers import Caller
from gmpo_plugins.compare.audit.verdict import TOLERANCE
from gmpo_plugins.compare.parity.harness import ParityCase
from gmpo_plugins.core.correction import Correction, apply_correction
from gmpo_plugins.core.types import LossInputs

ROLLOUT_NOISE = 0.3
ROLLOUT_JUMP = 2.5
JUMP_EVERY = 7

_TIS = {"rollout_is": "token", "rollout_is_threshold": 2.0}
_SEQ_TIS = {"rollout_is": "sequence", "rollout_is_threshold": 2.0}
_BAND = {"rollout_is_mode": "mask", "rollout_is_threshold": 2.0, "rollout_is_threshold_low": 0.5}
_SEQ_BAND = {"rollout_is_mode": "mask", "rollout_is_threshold": 5.0, "rollout_is_threshold_low": 0.2}


def _reject(option: str, threshold: float, low: float | None = None, count: str = "drop") -> dict[str, Any]:
    """A rejection row: by default the token or row leaves the mask (``rollout_mask_count="drop"``,
    as verl, which edits the response mask); ``count="keep"``: it stays in the count with weight
    0 (as SkyRL, whose advantage pre-scaling fixed the count before its masks act)."""
    found: dict[str, Any] = {"rollout_rs": option, "rollout_rs_threshold": threshold, "rollout_mask_count": count}
    return found if low is None else found | {"rollout_rs_threshold_low": low}


CORRECTION_ROWS: dict[str, dict[str, Any]] = {
    "token TIS 2": _TIS,
    "sequence TIS 2": _SEQ_TIS,
    "token mask [0.5, 2]": {"rollout_is": "token", **_BAND},
    "sequence mask [0.2, 5]": {"rollout_is": "sequence", **_SEQ_BAND},
    "token TIS 2, batch-normalised": _TIS | {"rollout_is_batch_normalize": True},
    "sequence TIS 2, batch-normalised": _SEQ_TIS | {"rollout_is_batch_normalize": True},
    "reject token_k1 [0.5, 2]": _reject("token_k1", 2.0, 0.5),
    "reject token_k2 0.5": _reject("token_k2", 0.5),
    "reject token_k3 0.5": _reject("token_k3", 0.5),
    "reject seq_sum_k1 [0.2, 5]": _reject("seq_sum_k1", 5.0, 0.2),
    "reject seq_sum_k3 10": _reject("seq_sum_k3", 10.0),
    "reject seq_mean_k2 0.5": _reject("seq_mean_k2", 0.5),
    "reject seq_mean_k3 0.7": _reject("seq_mean_k3", 0.7),
    "reject seq_max_k2 3.2": _reject("seq_max_k2", 3.2),
    "reject seq_max_k3 6.5": _reject("seq_max_k3", 6.5),
    "token TIS 2, reject seq_mean_k3 0.7": _TIS | _reject("seq_mean_k3", 0.7),
    "reject token_k1 [0.5, 2], counted": _reject("token_k1", 2.0, 0.5, "keep"),
    "reject seq_mean_k1 [0.8, 1.25], counted": _reject("seq_mean_k1", 1.25, 0.8, "keep"),
    "reject seq_sum_k1 [0.2, 5], counted": _reject("seq_sum_k1", 5.0, 0.2, "keep"),
    "token TIS 2, reject seq_mean_k1 [0.8, 1.25], counted": _TIS | _reject("seq_mean_k1", 1.25, 0.8, "keep"),
    "token IS uncapped, reject seq_mean_k1 [0.8, 1.25], counted": {"rollout_is": "token", "rollout_is_threshold": 1e9}
    | _reject("seq_mean_k1", 1.25, 0.8, "keep"),
}
"""Row -> the registry's correction options (``core.correction.CORRECTION_DEFAULTS`` for the rest)."""


def _verl(
    rollout_is: str | None, threshold: Any = 2.0, *, rs: str | None = None, rs_threshold: Any = None, **more: Any
) -> dict[str, Any]:
    """verl's ``algorithm.rollout_correction`` fields of one row."""
    fields: dict[str, Any] = {"rollout_is": rollout_is}
    if rollout_is is not None:
        fields["rollout_is_threshold"] = threshold
    if rs is not None:
        fields |= {"rollout_rs": rs, "rollout_rs_threshold": rs_threshold}
    return fields | more


def _openrlhf(level: str, mode: str, low: float, high: float) -> dict[str, Any]:
    """OpenRLHF's ``--algo.advantage.is_correction_*`` fields of one row (gating ``ratio``)."""
    return {
        "is_correction_level": level,
        "is_correction_mode": mode,
        "is_correction_gating": "ratio",
        "is_correction_threshold": (low, high),
    }


_SKYRL_GEOMETRIC = {"sequence_mask_metric": "geometric", "geo_mask_low": 0.8, "geo_mask_high": 1.25}

CORRECTION_TRANSLATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "verl": {
        "token TIS 2": _verl("token", 2.0),
        "sequence TIS 2": _verl("sequence", 2.0),
        "token mask [0.5, 2]": _verl("token", "0.5_2.0"),
        "sequence mask [0.2, 5]": _verl("sequence", "0.2_5.0"),
        "token TIS 2, batch-normalised": _verl("token", 2.0, rollout_is_batch_normalize=True),
        "sequence TIS 2, batch-normalised": _verl("sequence", 2.0, rollout_is_batch_normalize=True),
        "reject token_k1 [0.5, 2]": _verl(None, rs="token_k1", rs_threshold="0.5_2.0"),
        "reject token_k2 0.5": _verl(None, rs="token_k2", rs_threshold=0.5),
        "reject token_k3 0.5": _verl(None, rs="token_k3", rs_threshold=0.5),
        "reject seq_sum_k1 [0.2, 5]": _verl(None, rs="seq_sum_k1", rs_threshold="0.2_5.0"),
        "reject seq_sum_k3 10": _verl(None, rs="seq_sum_k3", rs_threshold=10.0),
        "reject seq_mean_k2 0.5": _verl(None, rs="seq_mean_k2", rs_threshold=0.5),
        "reject seq_mean_k3 0.7": _verl(None, rs="seq_mean_k3", rs_threshold=0.7),
        "reject seq_max_k2 3.2": _verl(None, rs="seq_max_k2", rs_threshold=3.2),
        "reject seq_max_k3 6.5": _verl(None, rs="seq_max_k3", rs_threshold=6.5),
        "token TIS 2, reject seq_mean_k3 0.7": _verl("token", 2.0, rs="seq_mean_k3", rs_threshold=0.7),
    },
    "openrlhf": {
        "token TIS 2": _openrlhf("token", "clip", 0.0, 2.0),
        "token mask [0.5, 2]": _openrlhf("token", "mask", 0.5, 2.0),
        "token IS uncapped, reject seq_mean_k1 [0.8, 1.25], counted": _openrlhf("seq", "mask", 0.8, 1.25),
    },
    "skyrl": {
        "token TIS 2": {"tis_ratio_type": "token", "token_tis_ratio_clip_high": 2.0},
        "sequence TIS 2": {"tis_ratio_type": "sequence", "sequence_tis_ratio_clip_high": 2.0},
        # the band's mask with the TIS cap at its top: the kept weights are never capped
        "token mask [0.5, 2]": {
            "tis_ratio_type": "token",
            "token_tis_ratio_clip_high": 2.0,
            "token_mask_is_threshold_low": 0.5,
            "token_mask_is_threshold_high": 2.0,
        },
        "sequence mask [0.2, 5]": {
            "tis_ratio_type": "sequence",
            "sequence_tis_ratio_clip_high": 5.0,
            "sequence_mask_metric": "product",
            "product_mask_low": 0.2,
            "product_mask_high": 5.0,
        },
        "reject token_k1 [0.5, 2], counted": {"token_mask_is_threshold_low": 0.5, "token_mask_is_threshold_high": 2.0},
        "reject seq_mean_k1 [0.8, 1.25], counted": _SKYRL_GEOMETRIC,
        "reject seq_sum_k1 [0.2, 5], counted": {
            "sequence_mask_metric": "product",
            "product_mask_low": 0.2,
            "product_mask_high": 5.0,
        },
        "token TIS 2, reject seq_mean_k1 [0.8, 1.25], counted": {
            "tis_ratio_type": "token",
            "token_tis_ratio_clip_high": 2.0,
            **_SKYRL_GEOMETRIC,
        },
        "token IS uncapped, reject seq_mean_k1 [0.8, 1.25], counted": {
            "tis_ratio_type": "token",
            "token_tis_ratio_clip_high": 1e9,
            **_SKYRL_GEOMETRIC,
        },
    },
}
"""Framework -> row -> the framework's own settings of that row (verl: the fields of
``algorithm.rollout_correction`` that ``compute_rollout_correction_and_rejection_mask`` reads;
OpenRLHF: the ``is_correction_*`` fields of its ``PolicyLoss``, gating ``ratio`` (its ``binary_kl``
and ``tv`` gates have no registry option: the adapter passes them as precomputed weights); SkyRL:
the fields of ``trainer.algorithm.off_policy_correction``). SkyRL's masks and OpenRLHF's sequence
band keep a token whose ratio exp(d) (the row's geometric mean) lies in [lo, hi]; the registry's
k1 rejection keeps -d within [log lo', log hi'], so their band [lo, hi] is the registry's
[1 / hi, 1 / lo]: the rows use bands symmetric in log space, where the two spellings coincide.
The registry's ``rollout_is_threshold=1e9`` stands for OpenRLHF's and SkyRL's uncapped token
ratio (the registry's log weight is bounded at 20 anyway)."""


@dataclass(frozen=True)
class CorrectionCell:
    """One (row, framework) verdict (module docstring)."""

    row: str
    framework: str
    verdict: str
    options: str
    setting: str
    d_factor: float | None = None
    count_differs: int | None = None
    acted: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The cell as the audit's JSON writes it."""
        return dict(self.__dict__)


def rollout_log_probs(case: ParityCase, index: int) -> torch.Tensor:
    """(B, T) float64: the case's old log-probs moved by the fixed draw of the module docstring."""
    generator = torch.Generator().manual_seed(1000 + index)
    old = case.old_log_probs
    shift = torch.randn(old.shape, generator=generator, dtype=torch.float64) * ROLLOUT_NOISE
    jumps = torch.arange(old.numel()).view(old.shape) % JUMP_EVERY == 0
    signs = torch.where(torch.rand(old.shape, generator=generator) < 0.5, -1.0, 1.0).double()
    return old - shift - torch.where(jumps, signs * ROLLOUT_JUMP, 0.0)


def registry_correction(
    options: Mapping[str, Any], old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(factor, counted, the share of valid tokens masked or truncated) of the registry's
    correction (module docstring) on a token-level loss."""
    inputs = LossInputs(old.clone(), old, torch.zeros(old.shape[0], dtype=old.dtype), mask, rollout_log_probs=rollout)
    corrected, metrics = apply_correction(inputs, Correction(**options), sequence_level=False)
    counted = corrected.mask.bool() & mask.bool()
    weights = corrected.rollout_is_weights
    factor = torch.ones_like(old) if weights is None else weights
    acted = float(metrics["rollout_token_masked_frac"] + metrics["rollout_token_truncated_frac"])
    return torch.where(counted, factor, 0.0), counted, acted


def _spelled(fields: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={value}" for key, value in fields.items())


def correction_cell(caller: Caller, row: str, module: ModuleType | None = None) -> CorrectionCell:
    """The verdict of ``caller``'s framework on ``row`` (module docstring)."""
    options = CORRECTION_ROWS[row]
    settings = CORRECTION_TRANSLATIONS.get(caller.name, {}).get(row)
    spelled = ", ".join(f"{key}={value}" for key, value in options.items())
    if settings is None:
        return CorrectionCell(row, caller.name, "not shipped", spelled, "")
    module = module if module is not None else caller.load()
    worst, differs, acted, valid = 0.0, 0, 0.0, 0
    for index, case in enumerate(audit_cases()):
        mask = case.mask.bool()
        rollout = rollout_log_probs(case, index)
        ours, ours_counted, share = registry_correction(options, case.old_log_probs, rollout, mask)
        theirs, theirs_counted = module.correction(settings, case.old_log_probs, rollout, mask)
        scale = ours.abs().clamp_min(1.0)
        gap = torch.where(mask, (theirs.double() - ours).abs() / scale, 0.0)
        worst = max(worst, float(gap.max()))
        differs += int(((theirs_counted.bool() != ours_counted) & mask).sum())
        acted += share * int(mask.sum())
        valid += int(mask.sum())
    verdict = "identical" if worst <= TOLERANCE and differs == 0 else "differs"
    return CorrectionCell(row, caller.name, verdict, spelled, _spelled(settings), worst, differs, acted / valid)


def run_corrections(callers: list[Caller]) -> list[CorrectionCell]:
    """Every (row, framework) cell of the frameworks whose caller module audits corrections."""
    cells: list[CorrectionCell] = []
    for caller in callers:
        module = caller.load()
        if hasattr(module, "correction"):
            cells.extend(correction_cell(caller, row, module) for row in CORRECTION_ROWS)
    return cells
