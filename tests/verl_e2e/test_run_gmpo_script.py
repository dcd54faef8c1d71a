"""examples/verl/run_gmpo.sh (the GPU command, not run here): its overrides compose against
verl's own Hydra config, pass verl's validate_config and the adapter's loss check, and carry
the paper's settings. No training is started."""

from __future__ import annotations

import os
import re
import warnings

import verl
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from gmpo_plugins.adapters.verl import check_policy_loss

from .harness import ROOT

SCRIPT = os.path.join(ROOT, "examples", "verl", "run_gmpo.sh")
PLACEHOLDERS = {'"$TRAIN"': "/data/train.parquet", '"$VAL"': "/data/test.parquet", '"$MODEL"': "Qwen/Qwen2.5-Math-7B"}


def script_overrides() -> list[str]:
    """The ``key=value`` lines of the script's verl command, shell quoting removed."""
    with open(SCRIPT) as handle:
        text = handle.read()
    command = text.split("python3 -m verl.trainer.main_ppo", 1)[1]
    overrides = []
    for line in command.splitlines():
        match = re.match(r"^\s+([\w.+]+=\S+)\s*\\?$", line)
        if match:
            key, value = match.group(1).split("=", 1)
            value = PLACEHOLDERS.get(value, value).strip("'")
            overrides.append(f"{key}={value}")
    return overrides


def test_script_states_it_was_not_run_here():
    with open(SCRIPT) as handle:
        assert "NOT RUN HERE" in handle.read()


def test_script_overrides_compose_and_validate_against_verls_config():
    overrides = script_overrides()
    assert len(overrides) > 25
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # verl: "Disabled critic as algorithm.adv_estimator != gae"
        validate_config(
            config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
        )
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    check_policy_loss(actor)  # loss_mode known to verl, fields valid for gmpo

    # the paper's settings
    assert actor.policy_loss.loss_mode == "gmpo" and actor.loss_agg_mode == "seq-mean-token-mean"
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.4, 0.4)  # log space for gmpo
    assert actor.optim.lr == 1e-6 and not actor.use_kl_loss
    rollout = config.actor_rollout_ref.rollout
    assert rollout.name == "vllm" and rollout.n == 8 and config.data.max_response_length == 3000
    responses = config.data.train_batch_size * rollout.n
    assert responses == 1024 and responses // (actor.ppo_mini_batch_size * rollout.n) == 8  # 8 updates of 128
