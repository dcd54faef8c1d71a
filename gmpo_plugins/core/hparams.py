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
    "tau_pos": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "tau_neg": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "delta_low": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "delta_high": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "ratio_cap": (lambda v: v is None or (_real(v) and v > 0), "None or a finite number > 0"),
    "dro_beta": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "clip_cov_ratio": (lambda v: _real(v) and 0 < v <= 1, "a number in (0, 1] (a fraction of the valid tokens)"),
    "clip_cov_lb": (_real, "a finite number"),
    "clip_cov_ub": (_real, "a finite number"),
    "kl_cov_ratio": (lambda v: _real(v) and 0 < v <= 1, "a number in (0, 1] (a fraction of the valid tokens)"),
    "ppo_kl_coef": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "vespo_k_pos": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "vespo_k_neg": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "vespo_lambda_pos": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "vespo_lambda_neg": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "topr_positive_weight": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "topr_negative_weight": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "m2_threshold": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "adv_tau": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "kl_tau": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "ipo_threshold": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
    "fipo_decay_rate": (lambda v: _real(v) and v > 0, "a finite number > 0"),
    "fipo_clip_range": (
        lambda v: v is None or (_real(v) and v >= 0),
        "None or a finite number >= 0 (None or 0: no clip)",
    ),
    "fipo_clip_high_only": (lambda v: isinstance(v, bool), "True or False"),
    "fipo_safety_threshold": (lambda v: v is None or (_real(v) and v > 0), "None or a finite number > 0"),
    "real_tau": (lambda v: _real(v) and v > 0, "a finite number > 0"),
}


REFUSED_REDUCTIONS = {
    "prompt_mean": "SkyRL's prompt_mean averages tokens within each prompt's group of samples; a group's token "
    "count spans micro-batches, and no adapter passes the grouping (LossInputs.group_ids) (pass per-sequence "
    "weights through the advantages instead)",
}
"""Reductions other frameworks have that the registry refuses, with the reason."""


def check_hparams(
    loss_name: str,
    values: Mapping[str, Any],
    *,
    reductions: tuple[str, ...],
    ratio_space: bool,
    optional: tuple[str, ...] = (),
) -> None:
    """Raise ValueError naming the first hyper-parameter whose value is out of range.

    ``optional`` names the hyper-parameters whose default is None (off) for this loss, e.g.
    cispo's ``eps_low`` (no lower clip): None is accepted for them, any other value is checked.
    """
    for name, value in values.items():
        if value is None and name in optional:
            continue
        if name == "reduction":
            if value in REFUSED_REDUCTIONS:
                raise ValueError(f"{loss_name}: reduction {value!r} is not supported: {REFUSED_REDUCTIONS[value]}")
            if value not in reductions:
                raise ValueError(f"{loss_name}: reduction must be one of {list(reductions)}, got {value!r}")
            continue
        check = _CHECKS.get(name)
        if check is not None and not check[0](value):
            raise ValueError(f"{loss_name}: {name} must be {check[1]}, got {value!r}")
    low, high = values.get("clip_cov_lb"), values.get("clip_cov_ub")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low >= high:
        raise ValueError(f"{loss_name}: clip_cov_lb must be < clip_cov_ub (a covariance band), got {low!r} >= {high!r}")
    if ratio_space and _real(values.get("eps_low")) and values["eps_low"] >= 1:
        raise ValueError(
            f"{loss_name}: eps_low must be < 1 (the ratio is clipped to [1 - eps_low, 1 + eps_high]), "
            f"got {values['eps_low']!r}"
        )
