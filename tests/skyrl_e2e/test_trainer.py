"""gmpo through SkyRL's own trainer on CPU (``RayPPOTrainer.train`` with FSDP2 on gloo, the CPU
stand-ins of ``examples/skyrl_cpu``): two steps, and parameter invariance where SkyRL splits
the batch (micro-batches in the worker's ``forward_backward``, data-parallel ranks).
"""

from __future__ import annotations

import math

import pytest

from .conftest import FIGURES
from .harness import max_abs_diff

# Invariance tolerance on max|params - params(1 micro-batch)| / max|update| after one SGD step
# (the update is -lr * gradient, so a gradient scaled by k moves the ratio to |k - 1|). In fp32,
# split runs differ only in summation order: each gradient entry is a sum over the mini-batch's
# 8 sequences x 8 tokens (accumulated over micro-batches, or all-reduced over ranks) of terms
# that are themselves sums from other padded shapes, each within a few ulp (eps = 1.2e-7);
# reordering a sum of n terms moves it by at most ~n eps of the sum of |terms|, a few hundred
# eps of the largest update component. 1e-4 (~800 eps) is above that and 4 orders of magnitude
# below the 0.5 (= |1/2 - 1|) that the split-dependent loss gives under 4 micro-batches.
TOLERANCE = 1e-4
SPLITS = ("mb2", "mb4", "dp2")


def finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def test_gmpo_trains_two_steps_through_skyrl_trainer(runs, initial_params):
    run = runs["gmpo_mb1"]
    assert sorted(run.steps) == [1, 2]
    # the engine received the initial weights and the weights after each step (SkyRL's sync)
    assert run.weight_versions == 3
    for step, metrics in run.steps.items():
        ours = [name for name in metrics if name.startswith("policy/loss_metrics/gmpo/")]
        assert ours, f"step {step}: no gmpo-plugins metric among SkyRL's logged metrics"
        numbers = {k: v for k, v in metrics.items() if not isinstance(v, str) or not k.startswith("timing")}
        bad = {k: v for k, v in numbers.items() if isinstance(v, (float, str)) and not finite(v)}
        assert not bad, f"step {step}: metrics not finite: {bad}"
        assert metrics["policy/grad_norm"] > 0
    # the reward varies, so GRPO's advantages are not all zero
    assert run.steps[1]["loss/avg_raw_advantages_abs"] > 0
    first, second = run.params(1), run.params(2)
    assert max_abs_diff(first, initial_params) > 0
    assert max_abs_diff(second, first) > 0


def relative_change(runs, initial_params, name: str, baseline: str = "gmpo_mb1") -> float:
    """max|params after one step of ``name`` - those of ``baseline``| / max|baseline's update|."""
    base = runs[baseline].params(1)
    update = max_abs_diff(base, initial_params)
    assert update > 0
    return max_abs_diff(runs[name].params(1), base) / update


def test_invariance_table(runs, initial_params):
    """Report the table (ours and SkyRL's gspo) before the assertions below."""
    lines = ["invariance after one step, max|params - params(1 micro-batch)| / max|update|:"]
    lines.append(f"{'loss':<22}{'2 micro-batches':>18}{'4 micro-batches':>18}{'2 ranks':>12}")
    for name, baseline in (("gmpo", "gmpo_mb1"), ("gspo", "gspo_mb1")):
        cells = [relative_change(runs, initial_params, f"{name}_{s}", baseline) for s in SPLITS]
        lines.append(f"{name:<22}" + "".join(f"{c:>{w}.2e}" for c, w in zip(cells, (18, 18, 12), strict=True)))
    split_dep = relative_change(runs, initial_params, "split_dependent_mb4")
    lines.append(f"{'split_dependent_gmpo':<22}{'':>18}{split_dep:>18.2e}{'':>12}")
    FIGURES.extend(lines)


@pytest.mark.parametrize("split", SPLITS)
def test_gmpo_parameters_invariant_to_split(runs, initial_params, split):
    assert relative_change(runs, initial_params, f"gmpo_{split}") <= TOLERANCE


def test_split_dependent_loss_fails_the_same_check(runs, initial_params):
    change = relative_change(runs, initial_params, "split_dependent_mb4")
    assert change > TOLERANCE
    # 4 micro-batches of 2 sequences, each micro-batch's sum divided by its 2 sequences: the
    # gradient is g / 2, so the SGD update is half of gmpo's and max|params - gmpo's| = 0.5 max|update|
    assert change == pytest.approx(0.5, rel=0.01)


def test_same_rollouts_in_every_split(runs):
    """Seeded generation: every run drew the same responses, so the splits differ only there."""
    rewards = {name: run.steps[1]["reward/avg_raw_reward"] for name, run in runs.items()}
    assert len(set(rewards.values())) == 1, rewards
