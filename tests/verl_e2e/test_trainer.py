"""verl 0.9.1's own default trainer (``trainer.use_v1=true``: TaskRunnerV1, PPOTrainerSync with
TransferQueue) on the CPU with gmpo-plugins losses (engine workers, FSDP2 on gloo, verl's
mini/micro-batch split and global_batch_info, its metric aggregation and loggers): two steps,
and the same update however verl splits the batch. The runs (``RUNS``) are made once per session
(conftest.trainer_runs); every test checks that its run learned something (``learned``)."""

from __future__ import annotations

import math

import pytest

from .conftest import FIGURES
from .harness import BATCH_TIMEOUT_S, Run, relative_difference

# the session's trainer runs are made in the first test that reads them; the batch has its own limit
pytestmark = pytest.mark.timeout(BATCH_TIMEOUT_S + 120)

# Invariance tolerance on max|params_a - params_b| / max|update| after one step.
# The splits change only the order of float32 sums: per-token log-probs are recomputed with
# other padded shapes (each within a few ulp, eps = 1.2e-7) and gradients are summed over
# micro-batches / reduced over ranks in another order. The update is lr * gradient, a sum of
# about 8 sequences x 10 tokens x 2 passes of terms, so its rounding stays within a few
# hundred eps of the largest update component. 1e-4 is ~800 eps: above that order-of-summation
# noise (measured: below 1e-6), far below what a split-dependent normalisation does (each
# micro-batch's gradient k times too large: a relative difference of order 1, measured 0.97
# for 4 micro-batches).
TOLERANCE = 1e-4
RUNS = ("gmpo_mb1", "gmpo_mb2", "gmpo_mb4", "gmpo_dp2", "split_dependent_mb4")  # read by conftest.trainer_runs
SPLITS = [("mb2", "2 micro-batches"), ("mb4", "4 micro-batches"), ("dp2", "2 gloo ranks")]


def _ok(run: Run) -> Run:
    assert run.status == "ok", f"trainer run {run.name} {run.status}: see the batch log named in the summary"
    learned(run)
    return run


def learned(run: Run, step: int = 1) -> None:
    """The step was not a no-op: some group's advantages are non-zero (its samples differ) and
    the parameters moved (a degenerate rollout, every sample of a group the same, gives zero
    advantages and no update, and would pass any invariance check)."""
    metrics = run.steps[step]
    assert metrics["critic/advantages/max"] > 1e-3 and metrics["critic/advantages/min"] < -1e-3, metrics
    assert metrics["actor/grad_norm"] > 0
    before, after = run.weights(step - 1), run.weights(step)
    update = max(float((after[k].double() - before[k].double()).abs().max()) for k in before)
    assert update > 1e-4, f"{run.name}: step {step} changed no parameter by more than {update:.3g}"


def _difference(runs: dict[str, Run], loss: str, split: str) -> float:
    base = _ok(runs["gmpo_mb1"])  # every loss compared here computes gmpo's loss with one micro-batch
    other = _ok(runs[f"{loss}_{split}"])
    return relative_difference(other.weights(1), base.weights(1), base.weights(0))


def test_gmpo_trains_two_steps_through_fit(trainer_runs):
    run = _ok(trainer_runs["gmpo_mb1"])
    assert sorted(run.steps) == [1, 2]
    for step, metrics in run.steps.items():
        # the loss that ran is ours: the adapter's actor/gmpo/... keys, aggregated and logged by verl
        assert {"actor/gmpo/seq_weight_max", "actor/gmpo/clip_frac_low", "actor/pg_loss"} <= set(metrics)
        bad = {key: value for key, value in metrics.items() if not math.isfinite(value)}
        assert not bad, f"step {step}: non-finite metrics {bad}"
        # the second pass (ppo_epochs=2) sees importance ratios off 1
        assert metrics["actor/gmpo/log_ratio_max"] - metrics["actor/gmpo/log_ratio_min"] > 1e-3
        assert metrics["critic/score/max"] > metrics["critic/score/min"]  # the reward varies
    learned(run, step=2)


@pytest.mark.parametrize(("split", "label"), SPLITS)
def test_gmpo_parameters_do_not_depend_on_how_verl_splits_the_batch(trainer_runs, split, label):
    difference = _difference(trainer_runs, "gmpo", split)
    FIGURES.append(f"gmpo, {label} vs 1 micro-batch: relative parameter difference {difference:.3g}")
    assert difference < TOLERANCE, f"gmpo, {label} vs 1 micro-batch: relative parameter difference {difference:.3g}"


def test_a_split_dependent_loss_fails_the_invariance_check(trainer_runs):
    # split_dependent_gmpo = gmpo normalised by micro-batch counts; with one micro-batch it IS
    # gmpo, so the 1-micro-batch gmpo run is its baseline
    difference = _difference(trainer_runs, "split_dependent", "mb4")
    FIGURES.append(f"split_dependent_gmpo, 4 micro-batches vs gmpo 1: relative parameter difference {difference:.3g}")
    assert difference > 100 * TOLERANCE
