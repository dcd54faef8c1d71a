"""``gmpo-openrlhf ... --actor.policy_loss_type gmpo`` through OpenRLHF's real train_ppo_ray loop on CPU:
2 global steps, our loss in PolicyModelActor, the actor learns, the engine gets the actor's weights."""

from __future__ import annotations

import math

import pytest
import torch

from tests.openrlhf.e2e.runner import KL_LOSS_ARGS, initial_weights, run_gmpo_openrlhf

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def gmpo_run(fixtures, tmp_path_factory):
    # lr 1e-2: Adam's first steps move every weight by about lr, past bf16's rounding of the norm weights (1.0)
    args = ["--actor.policy_loss_type", "gmpo", "--actor.adam.lr", "1e-2", *KL_LOSS_ARGS]
    return run_gmpo_openrlhf(fixtures, tmp_path_factory.mktemp("gmpo-2-steps"), args, steps=2).check()


def test_our_loss_ran_in_policy_model_actor_once_per_micro_batch(gmpo_run):
    calls = gmpo_run.loss_calls()
    # 2 steps x 4 samples, --train.micro_batch_size 1 (OpenRLHF's default): 4 micro-batches a step
    assert [call["actor_class"] for call in calls] == ["PolicyModelActor"] * 8
    assert {call["policy_loss_type"] for call in calls} == {"gmpo"}
    assert [call["rows"] for call in calls] == [1] * 8
    assert len({call["pid"] for call in calls}) == 1 and calls[0]["rank"] == 0


def test_logged_metrics_are_finite(gmpo_run):
    scalars = gmpo_run.scalars()
    for name in ("policy_loss", "ppo_clip_ratio", "ppo_kl", "actor_grad_norm"):
        values = scalars[f"train/{name}"]
        assert [step for step, _ in values] == [1, 2], name
        assert all(math.isfinite(value) for _, value in values), (name, values)
    assert all(value > 0 for _, value in scalars["train/actor_grad_norm"])


def test_actor_weights_change(gmpo_run, fixtures):
    before, after = initial_weights(fixtures["model"]), gmpo_run.actor_weights()
    assert before.keys() == after.keys()
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert len(changed) == len(before), sorted(set(before) - set(changed))


def test_engine_weights_equal_the_actors_after_the_last_sync(gmpo_run):
    engine, actor = gmpo_run.engine(), gmpo_run.actor_weights()
    assert engine["syncs"] == 2  # one weight sync after each step
    for name, weight in actor.items():
        assert torch.equal(engine["state_dict"][name], weight.float()), name
