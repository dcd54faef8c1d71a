"""``CheckedFSDPActorConfig``: pointing ``actor_rollout_ref.actor._target_`` at it makes verl's
own driver-side ``validate_config`` refuse a policy loss the adapter would refuse at the first
update (verl's composed config, ppo_trainer.yaml; the plain ``main_ppo`` launch is in
tests/verl_e2e/test_launch.py)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from verl.utils.config import omega_conf_to_dataclass

from gmpo_plugins.adapters.verl.checked_config import CheckedFSDPActorConfig

from .engine import ACTOR, VERL_CONFIG_DIR

TARGET = f"{ACTOR}._target_=gmpo_plugins.adapters.verl.checked_config.CheckedFSDPActorConfig"


def actor(*overrides: str):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        config = compose(
            config_name="ppo_trainer", overrides=[TARGET, f"{ACTOR}.ppo_micro_batch_size_per_gpu=2", *overrides]
        )
    return omega_conf_to_dataclass(config.actor_rollout_ref.actor)


def test_a_valid_loss_builds_the_checked_config():
    config = actor(
        f"{ACTOR}.policy_loss.loss_mode=gmpo",
        f"{ACTOR}.loss_agg_mode=seq-mean-token-mean",
        f"{ACTOR}.clip_ratio_low=0.4",
        f"{ACTOR}.clip_ratio_high=0.4",
    )
    assert isinstance(config, CheckedFSDPActorConfig) and config.policy_loss.loss_mode == "gmpo"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ([f"{ACTOR}.policy_loss.loss_mode=gmpo_typo"], [f"{ACTOR}.policy_loss.loss_mode=gmpo_typo", "'gmpo'"]),
        (
            [f"{ACTOR}.policy_loss.loss_mode=gmpo", f"{ACTOR}.clip_ratio_low=0"],
            [f"{ACTOR}.clip_ratio_low=0", "loss_mode=gmpo"],
        ),
    ],
    ids=["unknown-loss", "clip-ratio-low-zero"],
)
def test_a_loss_the_adapter_refuses_fails_when_verl_builds_the_actor_config(overrides, named):
    with pytest.raises(InstantiationException) as error:
        actor(*overrides)
    for text in named:
        assert text in str(error.value)
