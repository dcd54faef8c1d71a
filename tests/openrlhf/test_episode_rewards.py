"""A loss that reads each sample's reward (topr, the nll term) through OpenRLHF's own
``ActorPPOTrainer.training_step``: the rewards are the experience's, row for row
(``episode_rewards``), and a call outside a training step is refused naming the reason."""

from __future__ import annotations

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs
from gmpo_plugins.adapters.openrlhf.options import OpenRLHFConfigError

TOPR = ["--actor.policy_loss_type", "topr", "--algo.kl.init_coef", "0"]


def _core(actor, experience, info, plan, rewards):
    """The core loss of the plan on the actor's forward with ``rewards``, and its gradients."""
    log_probs = actor(experience.sequences, experience.action_mask, attention_mask=experience.attention_mask)
    inputs = LossInputs(
        log_probs,
        experience.action_log_probs,
        experience.advantages,
        experience.action_mask.bool(),
        rewards=rewards,
    )
    batch = BatchInfo(info["dp_size"], info["global_batch_size"], info["batch_num_tokens"])
    out = plan.spec(inputs, batch, **plan.hparams)
    actor.zero_grad(set_to_none=True)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in actor.named_parameters() if p.grad is not None}
    actor.zero_grad(set_to_none=True)
    return float(out.loss), grads


def test_topr_gets_the_experiences_rewards_in_openrlhfs_training_step(tiny_openrlhf):
    tiny = tiny_openrlhf
    args = tiny.build_args([*TOPR, *tiny.GROUP_ARGS])
    actor = tiny.build_actor()
    trainer, strategy = tiny.build_trainer(args, actor)
    plan = trainer.actor_loss_fn.__dict__["_gmpo_plugins_plan"]
    assert plan.spec.name == "topr" and plan.reads_rewards
    experience = tiny.build_experience(actor)
    # rewards whose signs differ from the advantages' (the tiny batch's advantages are its rewards), so
    # that topr's split by reward is not its split by advantage
    experience.rewards = torch.tensor([-1.0, 0.5, 0.25, 2.0, -1.0, 1.0, 1.0])
    info = tiny.loss_batch_info(strategy, experience)

    actor.train()
    expected, expected_grads = _core(actor, experience, info, plan, experience.rewards)
    by_advantage, _ = _core(actor, experience, info, plan, experience.advantages[:, 0])
    status = trainer.training_step(experience, kl_ctl=0.0, step=0, loss_batch_info=info)

    assert float(status["metrics"]["policy_loss"]) == pytest.approx(expected, abs=1e-6)
    assert abs(expected - by_advantage) > 1e-3  # the rewards decide the loss
    worst = max(float((expected_grads[n] - strategy.last_grads[n]).abs().max()) for n in expected_grads)
    assert worst <= 1e-6 and max(float(g.abs().max()) for g in expected_grads.values()) > 1e-4


def test_a_loss_that_reads_rewards_outside_a_training_step_is_refused(tiny_openrlhf):
    tiny = tiny_openrlhf
    args = tiny.build_args([*TOPR, *tiny.GROUP_ARGS])
    actor = tiny.build_actor()
    trainer, strategy = tiny.build_trainer(args, actor)
    experience = tiny.build_experience(actor)
    info = tiny.loss_batch_info(strategy, experience)
    log_probs = actor(experience.sequences, experience.action_mask, attention_mask=experience.attention_mask)
    with pytest.raises(OpenRLHFConfigError, match="topr reads each sample's reward.*outside it"):
        trainer.actor_loss_fn(
            log_probs,
            experience.action_log_probs,
            experience.advantages,
            action_mask=experience.action_mask,
            **info,
        )


def test_rewards_that_are_not_one_per_row_are_refused(tiny_openrlhf):
    tiny = tiny_openrlhf
    args = tiny.build_args([*TOPR, *tiny.GROUP_ARGS])
    actor = tiny.build_actor()
    trainer, strategy = tiny.build_trainer(args, actor)
    experience = tiny.build_experience(actor)
    experience.rewards = experience.rewards[:3]
    info = tiny.loss_batch_info(strategy, experience)
    with pytest.raises(OpenRLHFConfigError, match=r"holds \(3,\) rewards for 7 rows .*--ds.packing_samples"):
        trainer.training_step(experience, kl_ctl=0.0, step=0, loss_batch_info=info)
