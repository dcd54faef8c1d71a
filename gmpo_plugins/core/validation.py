"""Input checks that turn bad tensors into errors naming the argument.

Two levels. Structure (types, dtypes, shapes, devices) costs nothing and always runs.
Values (finite at valid positions, 0/1 mask, IS weights >= 0, one advantage per sequence)
read tensor contents and therefore synchronise with the device: they run when a loss is
called with ``validate=True``. Finite means finite: a -inf log-prob at a valid position is
refused like NaN (without value checks it gives a non-finite loss: ``core.prepared``).

Framework adapters decide per call whether to ask for value checks
(``adapters._common.value_checks_enabled``, ``GMPO_PLUGINS_VALIDATE``).
"""

from __future__ import annotations

import math
import os

import torch

from gmpo_plugins.core.types import BatchInfo, LossInputs

_ADVANTAGE_TOLERANCE = 1e-5
_OPTIONAL = ("ref_log_probs", "rollout_is_weights", "rollout_log_probs", "rewards", "entropy", "group_ids")


def _require_tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    return value


def _require_float(name: str, tensor: torch.Tensor) -> None:
    if not tensor.dtype.is_floating_point:
        raise TypeError(
            f"{name}: expected a floating-point tensor (float16, bfloat16, float32 or float64), got {tensor.dtype}"
        )


def _require_integer(name: str, tensor: torch.Tensor) -> None:
    if tensor.dtype.is_floating_point or tensor.is_complex() or tensor.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor (int64, int32, ...), got {tensor.dtype}")


def _require_shape(name: str, tensor: torch.Tensor, expected: tuple[int, ...], label: str) -> None:
    if tuple(tensor.shape) != expected:
        raise ValueError(f"{name}: expected shape {label} = {expected}, got {tuple(tensor.shape)}")


def _require_finite(name: str, tensor: torch.Tensor, mask: torch.Tensor) -> None:
    if tensor.dim() == 1:
        mask = mask.any(-1)
    if not bool(torch.where(mask, torch.isfinite(tensor), True).all()):
        raise ValueError(f"{name}: expected finite values at valid (mask=True) positions, found NaN or inf")


def validate_inputs(inputs: LossInputs, *, sequence_level: bool, values: bool = True) -> None:
    """Raise TypeError/ValueError naming the first bad argument of ``inputs``; the checks
    that read tensor values (and synchronise) only when ``values`` is True."""
    if not isinstance(inputs, LossInputs):
        raise TypeError(f"inputs: expected gmpo_plugins.LossInputs, got {type(inputs).__name__}")
    log_probs = _require_tensor("log_probs", inputs.log_probs)
    _require_float("log_probs", log_probs)
    if log_probs.dim() != 2:
        raise ValueError(f"log_probs: expected a 2-D tensor (B, T), got shape {tuple(log_probs.shape)}")
    batch_size, length = log_probs.shape
    bt = (batch_size, length)

    tensors: dict[str, torch.Tensor | None] = {
        "old_log_probs": inputs.old_log_probs,
        "advantages": inputs.advantages,
        "mask": inputs.mask,
        "ref_log_probs": inputs.ref_log_probs,
        "rollout_is_weights": inputs.rollout_is_weights,
        "rollout_log_probs": inputs.rollout_log_probs,
        "rewards": inputs.rewards,
        "entropy": inputs.entropy,
        "group_ids": inputs.group_ids,
    }
    for name, value in tensors.items():
        if value is None and name in _OPTIONAL:
            continue
        tensor = _require_tensor(name, value)
        if tensor.device != log_probs.device:
            raise ValueError(
                f"{name}: is on {tensor.device} but log_probs is on {log_probs.device}; put all inputs on one device"
            )
        if name == "group_ids":
            _require_integer(name, tensor)
        elif name != "mask":
            _require_float(name, tensor)

    _require_shape("old_log_probs", inputs.old_log_probs, bt, "(B, T)")
    _require_shape("mask", inputs.mask, bt, "(B, T)")
    for name in ("ref_log_probs", "rollout_log_probs", "entropy"):
        optional = tensors[name]
        if optional is not None:
            _require_shape(name, optional, bt, "(B, T)")
    for name in ("advantages", "rollout_is_weights"):
        optional = tensors[name]
        if optional is not None and tuple(optional.shape) not in ((batch_size,), bt):
            raise ValueError(
                f"{name}: expected shape (B,) = {(batch_size,)} or (B, T) = {bt}, got {tuple(optional.shape)}"
            )
    for name in ("rewards", "group_ids"):
        optional = tensors[name]
        if optional is not None:
            _require_shape(name, optional, (batch_size,), "(B,)")

    if not values or log_probs.numel() == 0:  # an empty micro-batch has no value to check
        return
    mask = inputs.mask
    if mask.dtype != torch.bool:
        if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"mask: expected bool or 0/1 values, got other values (dtype {mask.dtype})")
        mask = mask != 0
    for name in (
        "log_probs",
        "old_log_probs",
        "advantages",
        "ref_log_probs",
        "rollout_is_weights",
        "rollout_log_probs",
        "rewards",
        "entropy",
    ):
        optional = inputs.log_probs if name == "log_probs" else tensors[name]
        if optional is not None:
            _require_finite(name, optional, mask)
    weights = inputs.rollout_is_weights
    if weights is not None:
        valid = mask if weights.dim() == 2 else mask.any(-1)
        if not bool(torch.where(valid, weights >= 0, True).all()):
            raise ValueError("rollout_is_weights: expected values >= 0 at valid positions")

    advantages = inputs.advantages
    if sequence_level and advantages.dim() == 2:
        big = torch.finfo(advantages.dtype).max
        high = torch.where(mask, advantages, -big).amax(-1)
        low = torch.where(mask, advantages, big).amin(-1)
        spread = torch.where(mask.any(-1), high - low, 0)
        scale = torch.where(mask, advantages.abs(), 0).amax(-1)
        if bool((spread > _ADVANTAGE_TOLERANCE * (1 + scale)).any()):
            raise ValueError(
                "advantages: this loss is sequence-level and needs one advantage per sequence; "
                "got (B, T) advantages that vary within a sequence's valid tokens "
                "(pass shape (B,) or a row-constant (B, T))"
            )


def validate_batch_info(batch: BatchInfo, *, values: bool = True) -> None:
    """Raise ValueError/TypeError naming the bad field of ``batch``.

    Without reading a tensor: ``dp_size`` an int >= 1; a count given as a Python number
    finite and > 0; a tensor count one element, not bool. With ``values`` (which
    synchronises): tensor counts finite and > 0.
    Both counts may be fractional, as a Python number or a tensor alike, and neither is
    compared with the micro-batch's own: adapters pass rescaled counts (OpenRLHF the step's
    count divided by its accumulation steps, 7 sequences over 2 steps = 3.5; SkyRL unit
    counts with pre-scaled advantages) that may legitimately be smaller or not whole.
    A missing count with ``dp_size > 1`` is refused by the reduction that needs it
    (``reduce.require_global_count``).
    """
    if not isinstance(batch, BatchInfo):
        raise TypeError(f"batch: expected gmpo_plugins.BatchInfo, got {type(batch).__name__}")
    if isinstance(batch.dp_size, bool) or not isinstance(batch.dp_size, int) or batch.dp_size < 1:
        raise ValueError(f"batch.dp_size: expected an int >= 1, got {batch.dp_size!r}")
    for name in ("global_batch_size", "global_num_tokens"):
        value = getattr(batch, name)
        if value is None:
            continue
        if isinstance(value, torch.Tensor):
            if value.numel() != 1 or value.dtype == torch.bool or value.is_complex():
                raise ValueError(f"batch.{name}: expected a one-element real tensor, got {value!r}")
            if not values:
                continue
            if not bool(torch.isfinite(value).all() & (value > 0).all()):
                raise ValueError(f"batch.{name}: expected a finite count > 0, got {value!r}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"batch.{name}: expected a finite number > 0 or None, got {value!r}")


NONFINITE_ENV = "GMPO_PLUGINS_NONFINITE"
NONFINITE_MODES = ("propagate", "raise")
"""Values of ``GMPO_PLUGINS_NONFINITE`` (unset or empty: ``propagate``):

    propagate  a NaN or +-inf at a valid position of an input gives a non-finite loss and
               gradient (``core.prepared``'s rule), which the trainer's own guard sees
    raise      every registry call checks its inputs first (a synchronising read) and raises
               a ValueError at the first such position, naming the input, row and column
"""


_NONFINITE_MODE: dict[str, bool] = {}
"""The parsed ``GMPO_PLUGINS_NONFINITE`` once read (``nonfinite_raises``); tests clear it."""


@torch.compiler.assume_constant_result  # type: ignore[untyped-decorator]  # untyped in torch
def nonfinite_raises() -> bool:
    """True when ``GMPO_PLUGINS_NONFINITE=raise`` (``NONFINITE_MODES``; unset or empty:
    ``propagate``), read once per process (``torch.compile`` keeps the result as a constant);
    ValueError naming the variable for any other value."""
    if "raise" not in _NONFINITE_MODE:
        mode = os.environ.get(NONFINITE_ENV, "").strip().lower() or "propagate"
        if mode not in NONFINITE_MODES:
            raise ValueError(
                f"{NONFINITE_ENV}: expected one of {list(NONFINITE_MODES)} (or unset), "
                f"got {os.environ.get(NONFINITE_ENV)!r}"
            )
        _NONFINITE_MODE["raise"] = mode == "raise"
    return _NONFINITE_MODE["raise"]


def raise_at_first_nonfinite(inputs: LossInputs) -> None:
    """ValueError at the first valid (mask true) position, row by row and column by column,
    where an input is NaN or +-inf, naming that input (the first in ``LossInputs``' order
    there), its row and its column (a (B,) input: the row's first valid column); nothing
    when every valid position is finite. Reads the tensors: synchronises."""
    log_probs = inputs.log_probs
    if log_probs.numel() == 0:
        return
    mask = inputs.mask if inputs.mask.dtype == torch.bool else inputs.mask != 0
    names, flags = [], []
    for name, tensor in vars(inputs).items():
        if not isinstance(tensor, torch.Tensor) or tensor is inputs.mask:
            continue
        bad = ~torch.isfinite(tensor.detach())
        names.append(name)
        flags.append((bad[:, None] if bad.dim() == 1 else bad) & mask)
    stacked = torch.stack(flags)  # (inputs, B, T): each flag is (B, T) after the mask
    positions = stacked.any(0).nonzero()
    if positions.numel() == 0:
        return
    row, column = (int(i) for i in positions[0])
    name = names[int(stacked[:, row, column].nonzero()[0, 0])]
    value = vars(inputs)[name].detach()
    found = float(value[row] if value.dim() == 1 else value[row, column])
    raise ValueError(
        f"{name}: {found} at row {row}, column {column}, a valid (mask=True) position "
        f"({NONFINITE_ENV}=raise: every input must be finite where the mask is true)"
    )
