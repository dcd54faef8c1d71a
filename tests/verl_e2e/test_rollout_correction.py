"""What a registry loss receives under verl's ``algorithm.rollout_correction`` (the table of
docs/integrations/verl.md), read from the calls ``recorded_gmpo`` saved inside verl's
``ppo_loss`` (recording_loss.py), in the v1 trainer and (decoupled mode, its one smoke run in
test_other_runs.py) the deprecated legacy one.

    run (conftest)      mode        trainer  old_log_prob       rollout_is_weights     mask
    gmpo_mb4            decoupled   v1       actor recomputed   token IS, <= 2         rejection applied
    legacy_decoupled    decoupled   legacy   actor recomputed   token IS, <= 2         rejection applied
    gmpo_mb2            bypass      v1       rollout log-probs  None                   response mask

The CPU rollout server samples with the actor's float32 weights, so rollout and actor
log-probs agree to rounding: the weights are 1 and nothing is rejected up to that rounding.
What tells the modes apart is whether verl passes weights at all, its rollout-correction
metrics (``rollout_corr/rollout_is_*``, only where it computed IS weights) and whether it ran
the actor's old-log-prob pass (``timing_s/old_log_prob``, ``training/rollout_probs_diff_max``:
only when it recomputes old_log_prob).
"""

from __future__ import annotations

import glob
import os

import pytest
import torch

from .conftest import FIGURES
from .harness import BATCH_TIMEOUT_S, Run
from .test_trainer import _ok

# the session's trainer runs are made in the first test that reads them; the batch has its own limit
pytestmark = pytest.mark.timeout(BATCH_TIMEOUT_S + 120)
RUNS = ("gmpo_mb2", "gmpo_mb4")  # read by conftest.trainer_runs; legacy_decoupled: test_other_runs.py

ROUNDING = 1e-5  # |rollout - actor log-prob| on CPU float32: measured below 3e-7


def calls(run: Run) -> list[dict]:
    paths = sorted(glob.glob(os.path.join(run.weights_dir, "loss_calls", "call_*.pt")))
    assert paths, f"{run.name}: recorded_gmpo was never called"
    return [torch.load(path) for path in paths]


def response_mask_is_whole(call: dict) -> bool:
    """The mask covers each response from its first token without holes (nothing rejected)."""
    mask = call["response_mask"].to(torch.int64)
    lengths = mask.sum(dim=1, keepdim=True)
    return bool(torch.equal(mask, (torch.arange(mask.shape[1]) < lengths).to(torch.int64)))


def check_decoupled_mode(run: Run) -> None:
    """verl passed its token IS weights (truncated at 2, 1 to rounding) and its mask (nothing rejected)."""
    run = _ok(run)
    metrics = run.steps[1]
    # verl computed the IS weights (token level) and the rejection mask from old - rollout log-probs
    assert "rollout_corr/rollout_is_mean" in metrics and "training/rollout_probs_diff_max" in metrics
    assert metrics["training/rollout_probs_diff_max"] < ROUNDING
    recorded = calls(run)
    for call in recorded:
        weights, mask = call["rollout_is_weights"], call["response_mask"]
        assert weights is not None and weights.shape == mask.shape  # token level, (B, T)
        valid = weights[mask]
        assert float(valid.max()) <= 2.0  # truncated at rollout_is_threshold
        assert float((valid - 1).abs().max()) < ROUNDING
        assert response_mask_is_whole(call)  # token_k1 in [0.5, 2] rejected nothing here
    FIGURES.append(f"{run.name}: {len(recorded)} loss calls, each with verl's token IS weights (|w - 1| < {ROUNDING})")


def test_decoupled_mode_passes_verls_token_is_weights_and_its_mask(trainer_runs):
    check_decoupled_mode(trainer_runs["gmpo_mb4"])


def test_bypass_mode_calls_the_registry_loss_with_rollout_log_probs_and_no_weights(trainer_runs):
    run = _ok(trainer_runs["gmpo_mb2"])
    metrics = run.steps[1]
    assert "actor/gmpo/seq_weight_max" in metrics  # the registry loss ran, not verl's bypass loss
    assert not any(key.startswith("rollout_corr/rollout_is") for key in metrics)  # no IS weights computed
    assert "training/rollout_probs_diff_max" not in metrics  # old_log_prob not recomputed: the rollout's
    recorded = calls(run)
    for call in recorded:
        assert call["rollout_is_weights"] is None
        assert response_mask_is_whole(call)
    first = recorded[0]  # first pass of the first micro-batch: the actor's weights are the rollout's
    difference = (first["log_prob"] - first["old_log_prob"])[first["response_mask"]].abs().max()
    assert float(difference) < ROUNDING
