"""Other losses and the other trainer through verl 0.9.1: one step of gspo and dapo in its default
v1 trainer, one smoke run of its deprecated legacy trainer (RayPPOTrainer) with rollout
correction's decoupled mode (what the loss receives there: test_rollout_correction.py's table),
and what the v1 trainer does when the loss gets a NaN. The runs (``RUNS``) are made once per
session (conftest.trainer_runs)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from .harness import BATCH_TIMEOUT_S
from .test_rollout_correction import check_decoupled_mode
from .test_trainer import _ok

# the session's trainer runs are made in the first test that reads them; the batch has its own limit
pytestmark = pytest.mark.timeout(BATCH_TIMEOUT_S + 120)
RUNS = ("gspo", "dapo", "legacy_decoupled", "nonfinite")  # read by conftest.trainer_runs


@pytest.mark.parametrize(
    ("name", "marker"),
    [
        ("gspo", "actor/gmpo/seq_weight_max"),
        ("dapo", "actor/gmpo/clip_frac"),
        ("legacy_decoupled", "actor/gmpo/seq_weight_max"),  # the deprecated legacy trainer
    ],
)
def test_one_step_with_another_loss_or_trainer(trainer_runs, name, marker):
    run = _ok(trainer_runs[name])
    metrics = run.steps[1]
    assert marker in metrics and "actor/pg_loss" in metrics
    assert any(key.startswith("actor/gmpo/") for key in metrics)  # our loss ran
    bad = {key: value for key, value in metrics.items() if not math.isfinite(value)}
    assert not bad, f"non-finite metrics {bad}"


def test_decoupled_mode_in_the_legacy_trainer_passes_verls_token_is_weights_and_its_mask(trainer_runs):
    check_decoupled_mode(trainer_runs["legacy_decoupled"])


def test_a_nan_advantage_makes_the_loss_and_grad_norm_nan_and_verl_skips_the_step(trainer_runs):
    """nonfinite_gmpo (nonfinite_loss.py): one NaN advantage at a valid token of every micro-batch.
    The loss and the gradient are NaN (the registry's rule), verl logs both (as null), and its engine skips
    each optimiser step of the RL step (zero_grad on a non-finite grad norm): the parameters after
    the step are the initial ones, bit for bit (docs/api.md's table, verl's row)."""
    run = trainer_runs["nonfinite"]
    assert run.status == "ok", f"trainer run {run.name} {run.status}: see the batch log named in the summary"
    with open(os.path.join(run.weights_dir, "metrics.jsonl")) as handle:
        logged = json.loads(handle.readline())["data"]  # step 1, as verl's file logger wrote it
    # orjson, which verl's file logger uses, writes a NaN or inf as null (read_metrics drops them)
    assert logged["actor/pg_loss"] is None and logged["actor/grad_norm"] is None, logged
    assert logged["actor/entropy"] is not None  # the other actor metrics are numbers
    assert run.steps[1]["critic/advantages/max"] > 1e-3  # the rollout itself was fine: the step had data
    before, after = run.weights(0), run.weights(1)
    assert all(torch.equal(before[name], after[name]) for name in before)
