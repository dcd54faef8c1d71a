"""Intervals, paired differences and verdicts against hand-computed values."""

import math

import pytest

from gmpo_plugins.compare.report.stats import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    Estimate,
    mean_interval,
    paired_difference,
    t_quantile_975,
    verdict,
)


def test_mean_interval_four_values():
    # mean 2.5; sd = sqrt((1.5^2 + 0.5^2 + 0.5^2 + 1.5^2) / 3) = sqrt(5/3); t_{0.975,3} = 3.182
    estimate = mean_interval([1.0, 2.0, 3.0, 4.0])
    assert estimate.mean == 2.5 and estimate.n == 4
    assert estimate.half_width == pytest.approx(3.182 * math.sqrt(5 / 3) / 2)
    assert estimate.low == pytest.approx(2.5 - 2.0539, abs=1e-4)
    assert estimate.format(".2f") == "2.50 ± 2.05"


def test_mean_interval_two_values_and_one():
    # mean 0.2, sd = 0.1 * sqrt(2), half-width = 12.706 * sd / sqrt(2) = 1.2706
    assert mean_interval([0.1, 0.3]).half_width == pytest.approx(1.2706)
    single = mean_interval([0.7])
    assert single == Estimate(0.7, None, 1) and single.low is None and single.format() == "0.700"
    with pytest.raises(ValueError, match="at least one"):
        mean_interval([])


def test_t_quantiles():
    assert t_quantile_975(1) == 12.706 and t_quantile_975(4) == 2.776 and t_quantile_975(30) == 2.042
    # beyond the table: Cornish-Fisher, vs the exact t_{0.975,40} = 2.0211 and t_{0.975,120} = 1.9799
    assert t_quantile_975(40) == pytest.approx(2.0211, abs=2e-4)
    assert t_quantile_975(120) == pytest.approx(1.9799, abs=2e-4)
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_paired_difference_hand_values():
    # d = [0.1, 0.0, 0.3]: mean 0.1333, sd = sqrt(0.046667 / 2) = 0.152753, hw = 4.303 * sd / sqrt(3)
    diff = paired_difference([0.5, 0.7, 0.9], [0.4, 0.7, 0.6])
    assert diff.estimate.mean == pytest.approx(0.4 / 3)
    assert diff.estimate.half_width == pytest.approx(4.303 * 0.152753 / math.sqrt(3), rel=1e-5)
    assert (diff.greater, diff.less, diff.equal) == (2, 0, 1)
    assert diff.signs("gmpo", "grpo") == "gmpo > grpo on 2/3 seeds (1 equal)"
    assert paired_difference([1.0, 1.0], [2.0, 0.5]).signs("a", "b") == "a > b on 1/2 seeds"
    assert paired_difference([1.0, 1.0, 0.0], [2.0, 3.0, 0.5]).signs("a", "b") == "a < b on 3/3 seeds"
    with pytest.raises(ValueError, match="one value per seed"):
        paired_difference([1.0], [1.0, 2.0])


@pytest.mark.parametrize(
    ("values", "sign", "expected"),
    [
        ([-0.5, -0.4, -0.6], -1, SUPPORTED),  # interval [-0.748, -0.252], all below 0
        ([-0.5, -0.4, -0.6], +1, CONTRADICTED),
        ([0.5, 0.4, 0.6], +1, SUPPORTED),
        ([0.5, 0.4, 0.6], -1, CONTRADICTED),
        ([0.5, -0.4, 0.6], +1, INCONCLUSIVE),  # interval crosses 0
        ([0.0, 0.0, 0.0], -1, INCONCLUSIVE),  # [0, 0]: no sign at all
        ([0.0, 0.1, 0.2], +1, INCONCLUSIVE),  # [-0.148, 0.348]
        ([0.3], +1, INCONCLUSIVE),  # one seed: no interval
    ],
)
def test_verdict(values, sign, expected):
    assert verdict(mean_interval(values), sign) == expected


def test_verdict_needs_a_sign():
    with pytest.raises(ValueError, match="claimed_sign"):
        verdict(mean_interval([1.0, 2.0]), 0)
