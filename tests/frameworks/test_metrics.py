"""TRL's log_history -> one record per RL step in the run's vocabulary (hand values)."""

from __future__ import annotations

import pytest

from gmpo_plugins.frameworks.metrics import trl_records


def test_optimiser_steps_are_grouped_into_rl_steps():
    history = [
        {"step": 1, "reward": 1.0, "policy_loss": 0.5, "step_time": 0.25, "clip_ratio/low_mean": 0.0},
        {"step": 2, "reward": 3.0, "policy_loss": -0.5, "step_time": 0.5, "clip_ratio/low_mean": 0.5},
        {"step": 3, "reward": 2.0, "policy_loss": 0.25, "step_time": 1.0, "kl": 0.125},
        {"step": 3, "train_runtime": 9.0},  # the end-of-training summary: no policy_loss, skipped
    ]
    records = trl_records(history, optimiser_steps_per_rl_step=2)
    assert records == [
        # RL step 1 = optimiser steps 1 and 2: means (1 + 3) / 2, (0.5 - 0.5) / 2, (0 + 0.5) / 2; times summed
        {"step": 1, "reward": 2.0, "policy_loss": 0.0, "clip_frac_low": 0.25, "step_time": 0.75},
        # RL step 2 = optimiser step 3; kl only where TRL logged it, nothing invented
        {"step": 2, "reward": 2.0, "policy_loss": 0.25, "kl": 0.125, "step_time": 1.0},
    ]


def test_no_entries_no_records():
    assert trl_records([{"step": 1, "train_runtime": 1.0}], optimiser_steps_per_rl_step=1) == []


@pytest.mark.parametrize("per_step", [1, 3])
def test_each_optimiser_step_lands_in_its_rl_step(per_step):
    history = [{"step": s, "reward": float(s), "policy_loss": 0.0} for s in range(1, 2 * per_step + 1)]
    assert [r["step"] for r in trl_records(history, per_step)] == [1, 2]
