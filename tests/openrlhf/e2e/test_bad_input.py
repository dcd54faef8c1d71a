"""Bad input to ``gmpo-openrlhf`` on the real entry point: refused before Ray starts, with the message
on stderr; a run that Ray cannot schedule ends with a message instead of waiting forever."""

from __future__ import annotations

import pytest

from tests.openrlhf.e2e.runner import NO_KL_ARGS, run_gmpo_openrlhf

pytestmark = pytest.mark.timeout(600)


def test_unknown_policy_loss_type_exits_2_before_ray_starts(fixtures, tmp_path):
    run = run_gmpo_openrlhf(fixtures, tmp_path, ["--actor.policy_loss_type", "nosuch"])
    assert run.returncode == 2, run.output[-3000:]
    assert "gmpo-openrlhf: error: argument --actor.policy_loss_type: invalid choice: 'nosuch'" in run.output
    assert not run.ray_started


def test_a_refused_setting_exits_2_with_our_message_before_ray_starts(fixtures, tmp_path):
    args = ["--actor.policy_loss_type", "gmpo", "--actor.dual_clip", "3", *NO_KL_ARGS]
    run = run_gmpo_openrlhf(fixtures, tmp_path, args)
    assert run.returncode == 2, run.output[-3000:]
    assert "gmpo-openrlhf: error:" in run.output and "--actor.dual_clip=3.0 is not" in run.output
    assert not run.ray_started


def test_a_schedule_timeout_that_is_not_a_number_is_refused_before_ray_starts(fixtures, tmp_path):
    run = run_gmpo_openrlhf(
        fixtures,
        tmp_path,
        ["--actor.policy_loss_type", "gmpo", *NO_KL_ARGS],
        extra_env={"GMPO_OPENRLHF_SCHEDULE_TIMEOUT": "soon"},
    )
    assert run.returncode == 1 and not run.ray_started
    assert "GMPO_OPENRLHF_SCHEDULE_TIMEOUT='soon' must be a number of seconds >= 0" in run.output


@pytest.mark.ray
def test_a_ray_scheduling_stall_fails_with_a_message(fixtures, tmp_path):
    """No GPUs in the cluster: OpenRLHF's rollout placement group can never be placed."""
    run = run_gmpo_openrlhf(
        fixtures,
        tmp_path,
        ["--actor.policy_loss_type", "gmpo", *NO_KL_ARGS],
        ray_gpus=0,
        extra_env={"GMPO_OPENRLHF_SCHEDULE_TIMEOUT": "3"},
        timeout=300,
    )
    assert run.returncode == 1, run.output[-3000:]
    assert run.ray_started
    assert "gmpo-openrlhf: Ray could not schedule the run for 3 s: placement group" in run.output
    assert "'GPU': 1.0" in run.output and "the cluster has {'CPU': 4.0}" in run.output
