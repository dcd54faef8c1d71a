"""The policy-loss check in verl's driver: the entry point wraps ``verl.utils.config.validate_config``
(``verl_driver_check``), which verl's ``main_ppo`` calls on the composed config before Ray starts,
so a loss the adapter would refuse at the first actor update is refused there, on the default
launch (verl's composed config, ppo_trainer.yaml; the plain ``main_ppo`` launch is in
tests/verl_e2e/test_launch.py). verl 0.8 imports no entry point: the module is imported here, before
``main_ppo``, as ``VERL_USE_EXTERNAL_MODULES=gmpo_plugins.adapters.verl_plugin`` imports it at ``import verl``."""

from __future__ import annotations

import pytest
import verl.utils.config as verl_config
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

from gmpo_plugins.adapters import verl_plugin  # noqa: F401 - verl 0.8 loads no entry point (below)
from gmpo_plugins.adapters.load_failure import PluginLoadError, stand_in
from gmpo_plugins.adapters.verl import VerlConfigError
from gmpo_plugins.adapters.verl_driver_check import CHECKED, check_driver_config

from .engine import ACTOR, VERL_CONFIG_DIR

# the smallest batch settings verl's own validation accepts on one node of 8 devices
BATCHES = (
    "data.train_batch_size=8",
    f"{ACTOR}.ppo_mini_batch_size=8",
    f"{ACTOR}.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
)
GMPO = (
    f"{ACTOR}.policy_loss.loss_mode=gmpo",
    f"{ACTOR}.loss_agg_mode=seq-mean-token-mean",
    f"{ACTOR}.clip_ratio_low=0.4",
    f"{ACTOR}.clip_ratio_high=0.4",
)


def composed(*overrides: str):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=[*BATCHES, *overrides])


def validate(config) -> None:
    """What ``main_ppo.main`` calls first (the name bound in verl's own module)."""
    from verl.trainer import main_ppo

    main_ppo.validate_config(config=config, use_reference_policy=False, use_critic=False)


def test_main_ppo_calls_the_checking_validate_config():
    from verl.trainer import main_ppo

    assert getattr(main_ppo.validate_config, CHECKED, False)
    assert main_ppo.validate_config is verl_config.validate_config


@pytest.mark.parametrize(
    "loss", [GMPO, (f"{ACTOR}.policy_loss.loss_mode=vanilla",), ()], ids=["gmpo", "vanilla", "default"]
)
def test_a_loss_that_resolves_and_translates_passes(loss):
    validate(composed(*loss))


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ([f"{ACTOR}.policy_loss.loss_mode=gmpo_typo"], [f"{ACTOR}.policy_loss.loss_mode=gmpo_typo", "'gmpo'"]),
        ([*GMPO, f"{ACTOR}.clip_ratio_low=0"], [f"{ACTOR}.clip_ratio_low=0", "loss_mode=gmpo"]),
        (
            [*GMPO, "algorithm.rollout_correction.bypass_mode=true", "algorithm.rollout_correction.rollout_is=token"],
            ["algorithm.rollout_correction.rollout_is=token", "bypass_mode=true", "loss_mode=gmpo"],
        ),
    ],
    ids=["unknown-loss", "clip-ratio-low-zero", "bypass-is-weights-under-a-registry-loss"],
)
def test_a_loss_the_adapter_would_refuse_fails_in_verls_driver_validation(overrides, named):
    with pytest.raises(VerlConfigError) as error:
        validate(composed(*overrides))
    for text in named:
        assert text in str(error.value)


def test_the_policy_loss_is_named_before_other_settings_verl_refuses():
    bad_batch = "data.train_batch_size=4"  # verl's own validation refuses it
    with pytest.raises(AssertionError, match="train_batch_size"):
        validate(composed(bad_batch))
    with pytest.raises(VerlConfigError, match="loss_mode=gmpo_typo"):
        validate(composed(f"{ACTOR}.policy_loss.loss_mode=gmpo_typo", bad_batch))


def test_a_loss_of_a_package_that_failed_to_load_fails_in_the_driver_with_the_original_error(monkeypatch):
    failure = ImportError("no module named gmpo_plugins.core")
    monkeypatch.setitem(
        POLICY_LOSS_REGISTRY, "gmpo_failed", stand_in("gmpo_failed", PluginLoadError("failed: ..."), failure)
    )
    config = composed(f"{ACTOR}.policy_loss.loss_mode=gmpo_failed")
    with pytest.raises(PluginLoadError, match="failed: ...") as error:
        check_driver_config(config, failure)
    assert error.value.__cause__ is failure
    check_driver_config(composed(f"{ACTOR}.policy_loss.loss_mode=vanilla"), failure)  # verl's own loss: nothing
