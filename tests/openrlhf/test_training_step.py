"""OpenRLHF's own ``ActorPPOTrainer.training_step`` with ``--actor.policy_loss_type gmpo``.

The trainer is built from arguments parsed by gmpo-openrlhf's parser, so PolicyLoss is
constructed by OpenRLHF's code (ppo_actor.py) from the flags. The logged ``policy_loss``,
``ppo_clip_ratio`` and ``ppo_kl``, every other core metric under ``gmpo/`` with OpenRLHF's
weight for it, and the parameter gradients must equal the core's on the same actor forward
(plus OpenRLHF's own KL-loss term where enabled).
"""

from __future__ import annotations

import pytest

from gmpo_plugins import BatchInfo, LossInputs, get_loss

CASES = {
    "gmpo, KL loss, token-mean default": [
        "--actor.policy_loss_type",
        "gmpo",
        "--actor.eps_clip_low_high",
        "0.4",
        "0.4",
        "--algo.kl.use_loss",
        "--algo.kl.estimator",
        "k3",
    ],
    "gmpo, seq-mean-token-mean, no KL": [
        "--actor.policy_loss_type",
        "gmpo",
        "--actor.eps_clip",
        "0.2",
        "--actor.loss_agg_mode",
        "seq-mean-token-mean",
        "--algo.kl.init_coef",
        "0",
    ],
    "grpo token-mean (DAPO), entropy term": [
        "--actor.policy_loss_type",
        "gmpo_plugins.grpo",
        "--actor.eps_clip_low_high",
        "0.2",
        "0.28",
        "--algo.kl.init_coef",
        "0",
        "--actor.entropy_coef",
        "0.01",
    ],
}


def _reference(tiny, actor, experience, args, info, kl_ctl):
    """Core loss (+ OpenRLHF's KL/entropy terms as training_step adds them) and its gradients."""
    from openrlhf.models import aggregate_loss
    from openrlhf.models.utils import compute_approx_kl

    log_probs, output = actor(
        experience.sequences,
        experience.action_mask,
        attention_mask=experience.attention_mask,
        return_output=True,
        return_entropy=args.actor.entropy_coef is not None,
    )
    name = args.actor.policy_loss_type.removeprefix("gmpo_plugins.")
    low, high = args.actor.eps_clip_low_high
    hparams = {"eps_low": low, "eps_high": high}
    if name == "grpo":
        hparams["reduction"] = args.actor.loss_agg_mode
    out = get_loss(name)(
        LossInputs(log_probs, experience.action_log_probs, experience.advantages, experience.action_mask.bool()),
        BatchInfo(info["dp_size"], info["global_batch_size"], info["batch_num_tokens"]),
        **hparams,
    )
    total = out.loss
    if args.algo.kl.use_loss:
        kl = compute_approx_kl(
            log_probs,
            experience.base_action_log_probs,
            log_probs_old=experience.action_log_probs,
            kl_estimator=args.algo.kl.estimator,
            unbiased_gradient=args.algo.kl.unbiased_gradient,
        )
        total = total + aggregate_loss(kl, experience.action_mask, **info) * kl_ctl
    if args.actor.entropy_coef is not None:
        entropy = output.entropy[:, -experience.action_mask.shape[1] :]
        total = total - aggregate_loss(entropy, experience.action_mask, **info) * args.actor.entropy_coef
    actor.zero_grad(set_to_none=True)
    total.backward()
    grads = {n: p.grad.detach().clone() for n, p in actor.named_parameters() if p.grad is not None}
    actor.zero_grad(set_to_none=True)
    return out, grads


@pytest.mark.parametrize("argv", list(CASES.values()), ids=list(CASES))
def test_training_step_logs_the_core_metrics_and_gradients(tiny_openrlhf, argv):
    tiny = tiny_openrlhf
    args = tiny.build_args([*argv, *tiny.GROUP_ARGS])
    actor = tiny.build_actor()
    trainer, strategy = tiny.build_trainer(args, actor)
    assert trainer.actor_loss_fn.__dict__["_gmpo_plugins_plan"].spec.name == args.actor.policy_loss_type.removeprefix(
        "gmpo_plugins."
    )
    experience = tiny.build_experience(actor)
    info = tiny.loss_batch_info(strategy, experience)
    assert float(info["global_batch_size"]) == 6 and float(info["batch_num_tokens"]) == 25  # one empty response

    actor.train()
    out, ref_grads = _reference(tiny, actor, experience, args, info, kl_ctl=0.01)
    status = trainer.training_step(experience, kl_ctl=0.01, step=0, loss_batch_info=info)
    metrics = status["metrics"]

    assert abs(float(metrics["policy_loss"]) - float(out.metrics["policy_loss"])) <= 1e-6
    assert abs(float(metrics["ppo_clip_ratio"]) - float(out.metrics["clip_frac"])) <= 1e-6
    assert abs(float(metrics["ppo_kl"]) - float(out.metrics["ppo_kl"])) <= 1e-6
    assert float(out.metrics["clip_frac"]) > 0 and float(out.metrics["policy_loss"]) != 0
    assert status["weights"]["ppo_clip_ratio"] == status["weights"]["ppo_kl"] == "token"
    # every core metric but policy_loss (OpenRLHF's own) under gmpo/, per-sequence ones sample-weighted
    logged = {key.removeprefix("gmpo/"): value for key, value in metrics.items() if key.startswith("gmpo/")}
    assert set(logged) == set(out.metrics) - {"policy_loss"}
    for key, value in logged.items():
        assert abs(float(value) - float(out.metrics[key])) <= 1e-6, key
        assert status["weights"]["gmpo/" + key] == ("sample" if key.startswith("seq_weight") else "token"), key
    # fractions of the 25 valid tokens: whole token counts, low + high = both sides
    low, high = float(logged["clip_frac_low"]) * 25, float(logged["clip_frac_high"]) * 25
    assert abs(low - round(low)) <= 1e-4 and abs(high - round(high)) <= 1e-4 and round(low + high) > 0
    assert abs(float(logged["clip_frac"]) * 25 - round(low) - round(high)) <= 1e-4
    assert float(logged["log_ratio_min"]) < 0 < float(logged["log_ratio_max"])
    assert set(ref_grads) == set(strategy.last_grads)
    worst = max(float((ref_grads[n] - strategy.last_grads[n]).abs().max()) for n in ref_grads)
    assert worst <= 1e-6
    assert max(float(g.abs().max()) for g in ref_grads.values()) > 1e-4
