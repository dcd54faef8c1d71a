"""``algorithm.rollout_correction`` under a registry loss_mode, checked on verl's own composed
config (ppo_trainer.yaml) before training: bypass mode's settings that verl would not apply to
the registry loss are refused with the setting named; decoupled mode and plain bypass pass.
What the loss then receives in each mode is shown through verl's trainer in tests/verl_e2e."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from verl.utils.config import omega_conf_to_dataclass

from gmpo_plugins.adapters.verl import VerlConfigError, check_policy_loss

from .engine import ACTOR, VERL_CONFIG_DIR

CORRECTION = "algorithm.rollout_correction"


def check(loss_mode: str, *correction: str) -> None:
    overrides = [
        f"{ACTOR}.policy_loss.loss_mode={loss_mode}",
        f"{ACTOR}.ppo_micro_batch_size_per_gpu=2",
        f"{ACTOR}.loss_agg_mode=seq-mean-token-mean",
        *(f"{CORRECTION}.{setting}" for setting in correction),
    ]
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    check_policy_loss(omega_conf_to_dataclass(config.actor_rollout_ref.actor), config.algorithm.rollout_correction)


@pytest.mark.parametrize(
    "correction",
    [
        (),
        ("rollout_is=token", "rollout_rs=token_k1", "rollout_rs_threshold='0.5_2.0'"),  # decoupled: verl passes both
        ("rollout_is=sequence",),
        ("bypass_mode=true",),  # the registry loss against the rollout log-probs (loss_type=ppo_clip)
    ],
    ids=["none", "decoupled-token-is-and-rejection", "decoupled-sequence-is", "bypass-ppo-clip"],
)
def test_corrections_verl_applies_to_the_registry_loss_pass(correction):
    check("gmpo", *correction)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("rollout_is=token", f"{CORRECTION}.rollout_is=token"),
        ("rollout_is=sequence", f"{CORRECTION}.rollout_is=sequence"),
        ("rollout_rs=seq_mean_k3", f"{CORRECTION}.rollout_rs=seq_mean_k3"),
        ("loss_type=reinforce", f"{CORRECTION}.loss_type=reinforce"),
    ],
)
@pytest.mark.parametrize("loss_mode", ["gmpo", "gmpo_plugins.gmpo"])
def test_bypass_settings_verl_would_ignore_are_refused_naming_them(loss_mode, setting, named):
    with pytest.raises(VerlConfigError) as error:
        check(loss_mode, "bypass_mode=true", setting)
    message = str(error.value)
    assert named in message and f"{CORRECTION}.bypass_mode=true" in message and f"loss_mode={loss_mode}" in message


def test_verls_own_losses_are_not_checked():
    check("vanilla", "bypass_mode=true", "rollout_is=token", "loss_type=reinforce")
