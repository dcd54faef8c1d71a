"""TRL's log_history, verl's file logger and OpenRLHF's TensorBoard scalars -> one record per RL step in
the run's vocabulary (hand values)."""

from __future__ import annotations

import json

import pytest

from gmpo_plugins.frameworks.metrics import (
    aggregate,
    openrlhf_records,
    skyrl_records,
    trl_records,
    verl_records,
)


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


def test_trls_log_ratio_range_is_the_extremum_over_the_optimiser_steps_as_verls_is():
    """The on-policy first optimiser step logs a log-ratio range of exactly 0; the second the
    range of the moved policy. The RL step's range is the second's, not the mean with 0 (which
    would read half of it)."""
    history = [
        {"step": 1, "policy_loss": 0.0, "log_ratio_min": 0.0, "log_ratio_max": 0.0},
        {"step": 2, "policy_loss": 0.0, "log_ratio_min": -0.0873, "log_ratio_max": 0.0514},
    ]
    (record,) = trl_records(history, optimiser_steps_per_rl_step=2)
    assert record["log_ratio_min"] == -0.0873 and record["log_ratio_max"] == 0.0514
    line = verl_line(1, **{"actor/gmpo/log_ratio_min": -0.0873, "actor/gmpo/log_ratio_max": 0.0514})
    (verl,) = verl_records([line])
    assert (verl["log_ratio_min"], verl["log_ratio_max"]) == (record["log_ratio_min"], record["log_ratio_max"])


def test_aggregate_min_of_minima_max_of_maxima_sums_and_count_weighted_means():
    parts = [
        ({"log_ratio_min": -0.5, "log_ratio_max": 0.25, "clip_frac_low": 0.5, "step_time": 1.0}, 3.0),
        ({"log_ratio_min": -0.25, "log_ratio_max": 0.75, "clip_frac_low": 0.0, "step_time": 2.0}, 1.0),
        ({"entropy": 2.0}, 4.0),  # a metric one part lacks: aggregated over the parts that have it
    ]
    assert aggregate(parts) == {
        "log_ratio_min": -0.5,
        "log_ratio_max": 0.75,
        "clip_frac_low": 0.375,  # (3 * 0.5 + 1 * 0) / (3 + 1)
        "step_time": 3.0,
        "entropy": 2.0,
    }


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


def test_openrlhf_grad_norm_of_its_last_optimiser_step_is_left_out_when_an_rl_step_has_several():
    records = openrlhf_records(OPENRLHF_SCALARS, optimiser_steps=2)
    assert [record.get("grad_norm") for record in records] == [None, None]
    assert [record["policy_loss"] for record in records] == [0.125, -0.25]


def test_openrlhf_kl_without_a_reference_model_is_left_out():
    records = openrlhf_records(OPENRLHF_SCALARS, kl=False)
    assert [sorted(record) for record in records] == [["grad_norm", "policy_loss", "reward", "step", "step_time"]] * 2


def test_openrlhf_a_step_logged_twice_keeps_its_last_value_and_a_missing_tag_is_absent():
    scalars = {"train/policy_loss": [[1, 0.5], [1, 0.25]], "train/actor_grad_norm": [[1, 1.0]]}
    assert openrlhf_records(scalars) == [{"step": 1, "policy_loss": 0.25, "grad_norm": 1.0}]
    assert openrlhf_records({"train/actor_grad_norm": [[1, 1.0]]}) == []  # no policy loss: no RL step ran


def test_openrlhf_loss_metrics_are_read_from_openrlhfs_own_log():
    # the adapter logs them as train/gmpo/<key>, already this aggregation (logged_metrics)
    scalars = {
        **OPENRLHF_SCALARS,
        "train/gmpo/clip_frac_low": [[1, 0.375], [2, 0.5]],
        "train/gmpo/clip_frac_high": [[1, 0.25], [2, 0.125]],
        "train/gmpo/log_ratio_min": [[1, -0.75], [2, -0.5]],
        "train/gmpo/log_ratio_max": [[1, 0.5], [2, 1.0]],
        "train/gmpo/ppo_kl": [[1, 0.01], [2, 0.02]],  # no vocabulary name: not read
    }
    records = openrlhf_records(scalars, kl=False)
    assert records[0] == {
        "step": 1,
        "reward": 1.5,
        "policy_loss": 0.125,
        "clip_frac_low": 0.375,
        "clip_frac_high": 0.25,
        "log_ratio_min": -0.75,
        "log_ratio_max": 0.5,
        "grad_norm": 2.0,
        "step_time": 0.5,
    }
    assert list(records[0]) == ["step", *[name for name in records[0] if name != "step"]]
    assert records[1]["log_ratio_max"] == 1.0 and "clip_frac_dual" not in records[1]


def test_skyrl_payloads_map_to_the_vocabulary_in_step_order():
    # SkyRL has already aggregated each RL step's optimiser steps (reduce_metrics): the reader maps names only
    steps = {
        "2": {"reward/avg_raw_reward": 0.5, "policy/loss_metrics/gmpo/clip_frac_low": 0.0},
        "1": {
            "reward/avg_raw_reward": 1.125,
            "policy/policy_loss": 0.25,
            "policy/loss_metrics/gmpo/clip_frac_low": 0.09375,
            "policy/loss_metrics/gmpo/clip_frac_high": 0.078125,
            "policy/loss_metrics/gmpo/log_ratio_min": -0.75,
            "policy/loss_metrics/gmpo/log_ratio_max": 0.5,
            "policy/policy_entropy": 1.5,
            "policy/grad_norm": 2.0,
            "timing/step": 0.375,
            "policy/policy_lr": 0.01,  # not in the vocabulary
        },
    }
    assert skyrl_records({"steps": steps}) == [
        {
            "step": 1,
            "reward": 1.125,
            "policy_loss": 0.25,
            "clip_frac_low": 0.09375,
            "clip_frac_high": 0.078125,
            "log_ratio_min": -0.75,
            "log_ratio_max": 0.5,
            "entropy": 1.5,
            "grad_norm": 2.0,
            "step_time": 0.375,
        },
        {"step": 2, "reward": 0.5, "clip_frac_low": 0.0},
    ]
    assert skyrl_records({"steps": {}}) == []
