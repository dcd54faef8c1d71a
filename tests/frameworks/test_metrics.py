"""TRL's log_history, verl's file logger and OpenRLHF's TensorBoard scalars -> one record per RL step in
the run's vocabulary (hand values)."""

from __future__ import annotations

import json

import pytest

from gmpo_plugins.frameworks.metrics import openrlhf_records, trl_records, verl_records


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


def verl_line(step: int, **data: float) -> str:
    return json.dumps({"step": step, "data": data})


def test_verl_file_logger_lines_map_one_to_one():
    lines = [
        verl_line(2, **{"critic/score/mean": 0.5, "actor/pg_loss": -0.25, "actor/perf/max_memory_allocated_gb": 1.5}),
        "",
        verl_line(
            1,
            **{
                "critic/score/mean": 1.0,
                "critic/rewards/mean": 9.0,  # reward after verl's in-reward KL: not the reward function's
                "actor/gmpo/clip_frac_low": 0.125,
                "actor/gmpo/log_ratio_max": 0.75,
                "actor/entropy": 3.0,
                "actor/kl_loss": 0.0625,
                "actor/grad_norm": 2.0,
                "timing_s/step": 4.5,
            },
        ),
    ]
    assert verl_records(lines) == [
        {
            "step": 1,
            "reward": 1.0,
            "clip_frac_low": 0.125,
            "log_ratio_max": 0.75,
            "entropy": 3.0,
            "kl": 0.0625,
            "grad_norm": 2.0,
            "step_time": 4.5,
        },
        {"step": 2, "reward": 0.5, "policy_loss": -0.25, "peak_memory_gb": 1.5},
    ]
    # the CPU stand-ins' platform reports 0 for every memory figure: left out, not reported
    assert verl_records(lines, memory=False)[1] == {"step": 2, "reward": 0.5, "policy_loss": -0.25}


OPENRLHF_SCALARS = {
    "train/rollout/reward_mean": [[1, 1.5], [2, 1.25]],
    "train/policy_loss": [[1, 0.125], [2, -0.25]],
    "train/kl": [[1, 0.0], [2, 0.0]],
    "train/actor_grad_norm": [[1, 2.0], [2, 3.0]],
    "train/timing/step_total": [[1, 0.5], [2, 0.75]],
    "train/ppo_clip_ratio": [[1, 0.0], [2, 0.5]],  # both sides together: no vocabulary name
    "train/reward": [[1, 9.0], [2, 9.0]],  # the actor's average of the same rewards: rollout/reward_mean is mapped
}


def test_openrlhf_global_steps_are_rl_steps():
    assert openrlhf_records(OPENRLHF_SCALARS) == [
        {"step": 1, "reward": 1.5, "policy_loss": 0.125, "kl": 0.0, "grad_norm": 2.0, "step_time": 0.5},
        {"step": 2, "reward": 1.25, "policy_loss": -0.25, "kl": 0.0, "grad_norm": 3.0, "step_time": 0.75},
    ]


def test_openrlhf_kl_without_a_reference_model_is_left_out():
    records = openrlhf_records(OPENRLHF_SCALARS, kl=False)
    assert [sorted(record) for record in records] == [["grad_norm", "policy_loss", "reward", "step", "step_time"]] * 2


def test_openrlhf_a_step_logged_twice_keeps_its_last_value_and_a_missing_tag_is_absent():
    scalars = {"train/policy_loss": [[1, 0.5], [1, 0.25]], "train/actor_grad_norm": [[1, 1.0]]}
    assert openrlhf_records(scalars) == [{"step": 1, "policy_loss": 0.25, "grad_norm": 1.0}]
    assert openrlhf_records({"train/actor_grad_norm": [[1, 1.0]]}) == []  # no policy loss: no RL step ran
