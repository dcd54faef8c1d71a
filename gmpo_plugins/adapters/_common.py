"""What every adapter does the same way, kept in one place.

Translation: each adapter maps its framework's settings onto a registry loss's
hyper-parameters; ``check_translated_hparams`` checks them with an error that names the
framework's own setting and says what the value means for that loss (e.g. that ``eps`` is a
log-space bound for GMPO).

Validation policy: adapters call a loss once per micro-batch and ask
``value_checks_enabled`` whether to check values (which reads tensor contents and so
synchronises with the device; ``core.validation``). It follows ``GMPO_PLUGINS_VALIDATE``:

    first   (default) the first call of each loss in a process: catches integration
            mistakes (layout, mask, advantages) without a sync on every micro-batch
    always  every call (debugging)
    never   no value checks

Load failures (``PluginLoadError``) live in ``load_failure``, importable without torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from gmpo_plugins.core.hparams import check_hparams
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.terms import TERM_DEFAULTS, TERM_OPTIONS, check_terms

VALIDATE_ENV = "GMPO_PLUGINS_VALIDATE"
VALIDATE_MODES = ("first", "always", "never")
_value_checked: set[str] = set()


def value_checks_enabled(key: str) -> bool:
    """Whether an adapter should check values on this call of the loss ``key`` (module
    docstring); raises ValueError naming GMPO_PLUGINS_VALIDATE for an unknown mode."""
    mode = os.environ.get(VALIDATE_ENV, "first") or "first"
    if mode not in VALIDATE_MODES:
        raise ValueError(f"{VALIDATE_ENV}: expected one of {list(VALIDATE_MODES)}, got {mode!r}")
    if mode != "first":
        return mode == "always"
    if key in _value_checked:
        return False
    _value_checked.add(key)
    return True


def hparam_meaning(spec: LossSpec, hparam: str) -> str:
    """One clause explaining ``hparam`` of ``spec`` to a user of another framework."""
    if hparam in ("eps_low", "eps_high") and spec.clip_space == "log":
        side = "-eps_low" if hparam == "eps_low" else "+eps_high"
        return (
            f"it is {spec.name}'s {hparam}, a LOG-space bound: the per-token log ratio is clipped at "
            f"{side}, so expected a number > 0 (the GMPO paper uses 0.4)"
        )
    if hparam in ("eps_low", "eps_high"):
        side = "1 - eps_low" if hparam == "eps_low" else "1 + eps_high"
        return f"it is {spec.name}'s {hparam}, a RATIO-space bound: the ratio is clipped at {side}"
    if hparam == "dual_clip":
        return f"it is {spec.name}'s dual_clip: the lower bound of dual-clip PPO, expected a number > 1"
    if hparam == "reduction" and len(spec.reductions) == 1:
        return (
            f"{spec.name} is defined by its reduction {spec.reductions[0]!r}; set that, or choose "
            "the reduction freely with grpo"
        )
    if hparam == "reduction":
        return f"it is {spec.name}'s batch reduction, one of {list(spec.reductions)}"
    if hparam == "norm_length":
        return "it is the constant length of seq-mean-token-sum-norm, expected null or an int > 0"
    if hparam in TERM_OPTIONS:
        return f"it is the loss term option {hparam} ({TERM_OPTIONS[hparam]})"
    return f"it is {spec.name}'s {hparam}"


def check_translated_hparams(
    spec: LossSpec,
    params: Mapping[str, Any],
    *,
    setting_of: Callable[[str], str],
    context: str,
    error: type[ValueError],
) -> None:
    """Check ``params`` (already translated from a framework) like ``spec.resolve`` does,
    raising ``error`` with ``setting_of(hparam)`` (the framework's own name for the
    setting), the offending value, ``context`` and the meaning of the hyper-parameter."""
    ratio_space = spec.clip_space == "ratio"
    for hparam, value in params.items():
        try:
            if hparam in TERM_DEFAULTS:
                check_terms(spec.name, {hparam: value})
            else:
                check_hparams(spec.name, {hparam: value}, reductions=spec.reductions, ratio_space=ratio_space)
        except ValueError as exc:
            raise error(
                f"gmpo_plugins: {setting_of(hparam)}={value!r} is not valid for {context}: "
                f"{hparam_meaning(spec, hparam)} ({exc})"
            ) from exc


def scalar_metrics(metrics: Mapping[str, torch.Tensor | float | int], skip: frozenset[str]) -> dict[str, float]:
    """A ``LossOutput.metrics`` dict as Python floats, read in one device transfer.

    Args:
        metrics: metric name -> 0-dim tensor or number.
        skip: names the framework logs itself (left out).

    Returns:
        name -> float, in the order of ``metrics``.

    Raises:
        ValueError: a metric that is not a scalar, naming it (the frameworks' own metric
            containers would reject it later, without the name).
    """
    keys = [key for key in metrics if key not in skip]
    device = next((v.device for v in metrics.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
    scalars = []
    for key in keys:
        value = metrics[key]
        if isinstance(value, torch.Tensor) and value.numel() != 1:
            raise ValueError(f"gmpo_plugins: metric {key!r} must be a scalar, got shape {tuple(value.shape)}")
        scalars.append(torch.as_tensor(value).detach().reshape(()).to(device=device, dtype=torch.float64))
    return dict(zip(keys, torch.stack(scalars).tolist() if scalars else [], strict=True))
