"""``GMPO_OPENRLHF_HIDDEN_LOGPROBS=1``: OpenRLHF's ``Actor`` log-probs from the hidden states and
the lm_head, chunk by chunk, in OpenRLHF's own ``ActorPPOTrainer.training_step`` on CPU.

The patched step must equal the unpatched one (two actors from the same tiny Llama, float32):
the logged metrics and every parameter gradient to 1e-5 (both compute the same float32
log-softmax of the same logits, summed in other orders: over V = 64 and over at most 13
positions per chunk, a few ulp), at a temperature other than 1 too; and the path must have run
(OpenRLHF's ``log_probs_from_logits`` raises while it is on).
"""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch

from gmpo_plugins.adapters.openrlhf.hidden_logprobs import ENV, HiddenLogProbsError, enabled, hidden_state_forward

CASES = {
    "gmpo, KL loss": [
        "--actor.policy_loss_type",
        "gmpo",
        "--actor.eps_clip_low_high",
        "0.4",
        "0.4",
        "--algo.kl.use_loss",
    ],
    "ppo, entropy metric (coef 0)": ["--actor.policy_loss_type", "ppo", "--actor.entropy_coef", "0"],
}


def _step(tiny, argv, temperature, hidden):
    """metrics and gradients of one training_step, OpenRLHF's forward or the hidden-state one."""
    import openrlhf.models.actor as actor_module

    args = tiny.build_args([*argv, *tiny.GROUP_ARGS])
    actor = tiny.build_actor()
    actor.temperature = temperature
    trainer, strategy = tiny.build_trainer(args, actor)
    experience = tiny.build_experience(actor)
    info = tiny.loss_batch_info(strategy, experience)
    if not hidden:
        return trainer.training_step(experience, kl_ctl=0.01, step=0, loss_batch_info=info), strategy.last_grads

    def logits_path(*args, **kwargs):
        raise AssertionError("OpenRLHF's log_probs_from_logits ran with the setting on")

    forward = hidden_state_forward(actor_module.Actor.forward)
    with (
        patch.object(actor_module.Actor, "forward", forward),
        patch.object(actor_module, "log_probs_from_logits", logits_path),
    ):
        status = trainer.training_step(experience, kl_ctl=0.01, step=0, loss_batch_info=info)
    return status, strategy.last_grads


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("argv", list(CASES.values()), ids=list(CASES))
def test_training_step_equals_openrlhfs(tiny_openrlhf, argv, temperature):
    plain, plain_grads = _step(tiny_openrlhf, argv, temperature, hidden=False)
    hidden, hidden_grads = _step(tiny_openrlhf, argv, temperature, hidden=True)
    assert plain["metrics"].keys() == hidden["metrics"].keys()
    for name, value in plain["metrics"].items():
        value, other = torch.as_tensor(value).double(), torch.as_tensor(hidden["metrics"][name]).double()
        assert value.shape == other.shape and torch.allclose(other, value, rtol=1e-5, atol=1e-5), name
    if "--actor.entropy_coef" in argv:
        assert float(torch.as_tensor(hidden["metrics"]["entropy_loss"]).sum()) > 0  # the metric, not 0
    assert plain_grads.keys() == hidden_grads.keys() and plain_grads
    for name, grad in plain_grads.items():
        assert float((grad - hidden_grads[name]).abs().max()) <= 1e-5 * max(1.0, float(grad.abs().max())), name
    assert max(float(g.abs().max()) for g in plain_grads.values()) > 1e-4


def test_no_grad_forwards_equal_openrlhfs(tiny_openrlhf):
    """The old-log-prob and reference forwards (no grad, ``action_mask`` given) and a
    ``return_logprobs`` call (every position), against OpenRLHF's own."""
    import openrlhf.models.actor as actor_module

    actor = tiny_openrlhf.build_actor()
    actor.temperature = 0.7
    experience = tiny_openrlhf.build_experience(actor)
    seq, mask, attention = experience.sequences, experience.action_mask, experience.attention_mask
    with torch.no_grad():
        plain = actor(seq, mask, attention_mask=attention)
        every = actor(seq, attention_mask=attention, return_logprobs=True)
        with patch.object(actor_module.Actor, "forward", hidden_state_forward(actor_module.Actor.forward)):
            hidden = actor(seq, mask, attention_mask=attention)
            hidden_every = actor(seq, attention_mask=attention, return_logprobs=True)
    assert plain.shape == hidden.shape and every.shape == hidden_every.shape == (seq.shape[0], seq.shape[1] - 1)
    assert float((plain - hidden).abs().max()) <= 1e-5 and float((every - hidden_every).abs().max()) <= 1e-5
    assert float(plain.abs().max()) > 0.1


PACKED = ["--vllm.num_engines", "1"]  # OpenRLHF asserts vLLM engines for packed samples
REFUSED = [
    (["--actor.entropy_coef", "0.01"], "--actor.entropy_coef 0.01"),
    (["--ds.packing_samples", *PACKED], "--ds.packing_samples: packed rows"),
    (
        ["--train.dynamic_batch_enable", *PACKED],
        "--ds.packing_samples (OpenRLHF turns it on for --train.dynamic_batch_enable): packed rows",
    ),
    (["--ds.ring_attn_size", "2", *PACKED], "--ds.ring_attn_size 2: ring attention"),
    (["--actor.aux_loss_coef", "0.01"], "--actor.aux_loss_coef 0.01"),
]


@pytest.mark.parametrize(("argv", "flag"), REFUSED, ids=[flag.split(":")[0] for _, flag in REFUSED])
@pytest.mark.parametrize("loss", ["gmpo", "ppo"])
def test_what_the_path_cannot_honour_is_refused_before_training(loss_module, monkeypatch, capsys, argv, flag, loss):
    """At parse time, on the arguments as OpenRLHF normalised them (``--train.dynamic_batch_enable``
    turns packing on there), before ``train(args)`` starts Ray."""
    from gmpo_plugins.adapters.openrlhf.cli import parse_args

    base = ["--actor.policy_loss_type", loss, *(["--actor.eps_clip_low_high", "0.4", "0.4"] if loss == "gmpo" else [])]
    group = ["--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "2", "--algo.kl.use_loss"]
    parse_args([*base, *group, *argv])  # accepted without the setting
    monkeypatch.setenv(ENV, "1")
    with pytest.raises(SystemExit) as exc:
        parse_args([*base, *group, *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"{ENV}=1 cannot honour" in err and flag in err
    parse_args([*base, *group, "--actor.entropy_coef", "0"])  # the entropy as a metric is fine
    parse_args([*base, *group, "--ds.zero_stage", "3"])  # ZeRO-3: the head is gathered by its own call


def test_the_setting_reaches_the_ray_workers(monkeypatch):
    from gmpo_plugins.adapters.openrlhf.hook import HOOK, runtime_env

    monkeypatch.delenv(ENV, raising=False)
    assert runtime_env({"env_vars": {"A": "1"}}) == {"env_vars": {"A": "1"}, "worker_process_setup_hook": HOOK}
    monkeypatch.setenv(ENV, "1")
    env = runtime_env({"env_vars": {"A": "1"}})
    assert env["env_vars"] == {"A": "1", ENV: "1"} and env["worker_process_setup_hook"] == HOOK


@pytest.mark.parametrize(("value", "on"), [("", False), ("0", False), ("1", True), (" 1 ", True)])
def test_setting_values(monkeypatch, value, on):
    monkeypatch.setenv(ENV, value)
    assert enabled() is on


def test_a_bad_setting_value_is_named(monkeypatch):
    monkeypatch.setenv(ENV, "yes")
    with pytest.raises(HiddenLogProbsError, match=f"{ENV}: expected 1 .* got 'yes'"):
        enabled()
