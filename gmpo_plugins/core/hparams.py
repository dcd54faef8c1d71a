"""Checks of hyper-parameter values, one table for every loss.

A loss declares its hyper-parameters through its defaults; values are checked here
without touching any tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from gmpo_plugins.core.kl import KL_ESTIMATORS
from gmpo_plugins.core.prepared import IS_AGGREGATIONS, LOG_RATIO_BOUND_MAX


def _real(value: Any) -> bool:
    # comparisons rather than math.isfinite: under torch.compile a hyper-parameter that
    # changes between calls becomes a symbolic float, which comparisons accept (NaN fails both)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and -math.inf < value < math.inf


_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "eps_low": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "eps_high": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "kl_beta": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "kl_estimator": (lambda v: v in KL_ESTIMATORS, f"one of {list(KL_ESTIMATORS)}"),
    "dual_clip": (lambda v: v is None or (_real(v) and v > 1), "None or a finite number > 1"),
    "log_ratio_bound": (
        lambda v: _real(v) and 0 < v <= LOG_RATIO_BOUND_MAX,
        f"a finite number > 0 and <= {LOG_RATIO_BOUND_MAX:.6g} (0.9 * ln(float32 max): e^bound must stay finite)",
    ),
    "kl_clamp": (lambda v: v is None or (_real(v) and v > 0), "None or a finite number > 0"),
    "rollout_is_aggregation": (lambda v: v in IS_AGGREGATIONS, f"one of {list(IS_AGGREGATIONS)}"),
    "norm_length": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "an int > 0"),
}


def check_hparams(loss_name: str, values: Mapping[str, Any], *, reductions: tuple[str, ...], ratio_space: bool) -> None:
    """Raise ValueError naming the first hyper-parameter whose value is out of range."""
    for name, value in values.items():
        if name == "reduction":
            if value not in reductions:
                raise ValueError(f"{loss_name}: reduction must be one of {list(reductions)}, got {value!r}")
            continue
        check = _CHECKS.get(name)
        if check is not None and not check[0](value):
            raise ValueError(f"{loss_name}: {name} must be {check[1]}, got {value!r}")
    if ratio_space and _real(values.get("eps_low")) and values["eps_low"] >= 1:
        raise ValueError(
            f"{loss_name}: eps_low must be < 1 (the ratio is clipped to [1 - eps_low, 1 + eps_high]), "
            f"got {values['eps_low']!r}"
        )
