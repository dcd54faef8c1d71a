"""Statistics over seeds: Student-t 95% intervals, paired differences, sign counts, verdicts.

For values x_1..x_n (one per seed):

    mean      m = sum_i x_i / n
    sd        s = sqrt(sum_i (x_i - m)^2 / (n - 1))              (unbiased)
    interval  m -+ t_{0.975, n-1} * s / sqrt(n)                   (Student t, 95%, two-sided)

A paired difference between losses a and b uses d_i = a_i - b_i on the same seed (same
initial model, same first rollout) and the interval of the d_i. With one seed there is no
interval (half-width None). The t quantiles for n - 1 <= 30 are the tabulated values;
beyond, the Cornish-Fisher expansion of the normal quantile (error < 1e-4).

Verdict of a claim "a - b has sign s" (s = +1 or -1) from the interval [lo, hi] of d:

    supported       the whole interval is on the claimed side (s * lo > 0 and s * hi > 0)
    contradicted    the whole interval is on the other side
    inconclusive    the interval contains 0, or there is no interval (one seed)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

INTERVAL_METHOD = "Student t, 95%, over seeds"
# t_{0.975, df} for df = 1..30
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
Z975 = 1.959964

SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df <= len(T975):
        return T975[df - 1]
    z = Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Estimate:
    """Mean of ``n`` values with the half-width of its 95% t interval (None when n < 2)."""

    mean: float
    half_width: float | None
    n: int

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width

    def format(self, spec: str = ".3f") -> str:
        """``"0.512 ± 0.041"``, or the mean alone without an interval."""
        if self.half_width is None:
            return format(self.mean, spec)
        return f"{self.mean:{spec}} ± {self.half_width:{spec}}"


def mean_interval(values: Sequence[float]) -> Estimate:
    """Mean and 95% t half-width of ``values`` (at least one)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_interval needs at least one value")
    mean = sum(values) / n
    if n < 2:
        return Estimate(mean, None, n)
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
    return Estimate(mean, t_quantile_975(n - 1) * sd / math.sqrt(n), n)


@dataclass(frozen=True)
class PairedDifference:
    """a - b over seeds: the interval of the per-seed differences and their sign counts."""

    estimate: Estimate
    greater: int  # seeds with a > b
    less: int  # seeds with a < b
    equal: int

    def signs(self, a: str, b: str) -> str:
        """``"gmpo > grpo on 4/5 seeds"`` (the majority direction; ties named when present)."""
        n = self.greater + self.less + self.equal
        if self.greater >= self.less:
            text = f"{a} > {b} on {self.greater}/{n} seeds"
        else:
            text = f"{a} < {b} on {self.less}/{n} seeds"
        return text + (f" ({self.equal} equal)" if self.equal else "")


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """Interval and sign counts of ``a[i] - b[i]`` (same seed i in both)."""
    if len(a) != len(b):
        raise ValueError(f"paired_difference needs one value per seed on both sides, got {len(a)} and {len(b)}")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    return PairedDifference(
        estimate=mean_interval(diffs),
        greater=sum(d > 0 for d in diffs),
        less=sum(d < 0 for d in diffs),
        equal=sum(d == 0 for d in diffs),
    )


def verdict(estimate: Estimate, claimed_sign: int) -> str:
    """supported / contradicted / inconclusive for the claim sign(difference) == ``claimed_sign``."""
    if claimed_sign not in (1, -1):
        raise ValueError(f"claimed_sign must be +1 or -1, got {claimed_sign}")
    if estimate.low is None or estimate.high is None:
        return INCONCLUSIVE
    if claimed_sign * estimate.low > 0 and claimed_sign * estimate.high > 0:
        return SUPPORTED
    if claimed_sign * estimate.low < 0 and claimed_sign * estimate.high < 0:
        return CONTRADICTED
    return INCONCLUSIVE
