"""``gmpo-plugins frameworks``' OpenRLHF translation against OpenRLHF 0.11.2: the arguments parse
with gmpo-openrlhf's parser (OpenRLHF's train_ppo_ray parser plus the adapter's checks) into
the intended values, and the adapter reads the spec's loss hyper-parameters back from them."""

from __future__ import annotations

import pytest

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.openrlhf.cli import parse_args
from gmpo_plugins.adapters.openrlhf.options import plan_loss
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.translate import openrlhf as translator
from tests import run_specs


def spec_in(tmp_path, **values):
    return run_specs.spec_in(tmp_path, **{"max_prompt_length": 100, "max_response_length": 28, **values})


@pytest.mark.parametrize(
    "values",
    [
        {"loss_hparams": {"eps_low": 0.3, "eps_high": 0.5}},
        {"kl_coef": 0.05, "kl_estimator": "k2", "advantage_std_norm": False},
        {"loss": "grpo", "loss_hparams": {"dual_clip": 3.0, "reduction": "token-mean"}},
        {"loss": "gspo"},
        {"loss": "grpo", "loss_hparams": {"dual_clip": 3.0}},
        {"loss": "dapo"},
    ],
)
def test_the_arguments_parse_with_gmpo_openrlhfs_parser(tmp_path, monkeypatch, values):
    spec = spec_in(tmp_path, **values)
    launch = translator.translate(spec).with_out(str(tmp_path / "out"))
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    for key, value in launch.env.items():  # what the launch's environment gives the adapter
        monkeypatch.setenv(key, value)
    args = vars(parse_args(list(launch.argv[1:])))
    # OpenRLHF counts responses for training and prompts for rollouts
    assert (args["rollout.batch_size"], args["rollout.n_samples_per_prompt"], args["train.batch_size"]) == (4, 4, 8)
    assert (args["train.micro_batch_size"], args["train.max_epochs"], args["train.seed"]) == (2, 2, 7)
    assert args["data.max_samples"] == 5 * 4 and args["train.num_episodes"] == 1  # 5 steps of 4 prompts
    assert (args["data.max_len"], args["rollout.max_new_tokens"]) == (128, 28)
    assert (args["data.input_key"], args["data.label_key"], args["data.apply_chat_template"]) == (
        "prompt",
        "answer",
        True,
    )
    assert args["actor.adam.lr"] == spec.learning_rate and list(args["actor.adam.betas"]) == [0.9, 0.999]
    assert (args["actor.lr_scheduler"], args["actor.lr_warmup_ratio"], args["actor.max_norm"]) == ("constant", 0, 1.0)
    assert args["algo.advantage.estimator"] == ("group_norm" if spec.advantage_std_norm else "dr_grpo")
    assert args["algo.kl.use_loss"] is (spec.kl_coef > 0) and args["algo.kl.init_coef"] == spec.kl_coef
    if spec.kl_coef > 0:
        assert args["algo.kl.estimator"] == "k2"
    assert args["reward.remote_url"] == f"{tmp_path}/out/reward.py"

    loss = get_loss(spec.loss)
    low, high = args["actor.eps_clip_low_high"] or (args["actor.eps_clip"], args["actor.eps_clip"])
    plan = plan_loss(
        args["actor.policy_loss_type"],
        clip_eps_low=low,
        clip_eps_high=high,
        dual_clip=args["actor.dual_clip"],
        token_level_loss=args["actor.loss_agg_mode"] == "token-mean",
    )
    wanted = spec.resolved_hparams()
    assert dict(plan.hparams) == {key: wanted[key] for key in plan.hparams}
    assert all(wanted[key] == loss.defaults[key] for key in wanted if key not in plan.hparams)
