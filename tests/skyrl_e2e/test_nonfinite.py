"""What SkyRL's own trainer does when the loss gets a NaN: the run ``nonfinite`` (conftest), gmpo
fed one NaN advantage at a valid token of every micro-batch (nonfinite_loss.py)."""

from __future__ import annotations

import math

from .harness import max_abs_diff


def test_a_nan_advantage_makes_the_grad_norm_nan_and_skyrl_skips_the_step(runs, initial_params):
    """The loss and the gradient are NaN (the registry's rule), SkyRL logs them, and
    its FSDP strategy skips the optimiser step (zero_grad on a non-finite clipped grad norm): the
    weights the engine receives after the step are the initial ones, bit for bit (docs/api.md's
    table, SkyRL's row)."""
    metrics = runs["nonfinite"].steps[1]
    # skyrl_cpu.launch writes a non-finite metric as its string ("nan", "inf")
    assert metrics["policy/grad_norm"] == "nan" and metrics["policy/policy_loss"] == "nan", metrics
    assert math.isfinite(metrics["policy/policy_entropy"])  # the other policy metrics are numbers
    assert metrics["loss/avg_raw_advantages_abs"] > 0  # the rollout itself was fine: the step had data
    assert max_abs_diff(runs["nonfinite"].params(1), initial_params) == 0
