"""SkyRL's ``rollout_logprobs`` reach the registry loss as ``LossInputs.rollout_log_probs``
(``adapters/skyrl/options.py``, rollout log-probs): through SkyRL's registry, its advantage
pre-scaling and the worker's arithmetic (``helpers.skyrl_step``), a loss that reads them and a
core correction option equal the core on the whole mini-batch (``rollout_bypass``: the ratio
against them); without them (or with ``generator.sampling_params.logprobs=null``) the refusal
names the setting, and SkyRL's own ``off_policy_correction`` beside the core's is refused naming
both."""

from __future__ import annotations

import json

import pytest

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.skyrl import SkyRLConfigError

from .helpers import algorithm_config, core_hparams, core_step, make_batch, skyrl_step

TOKEN_TIS = {"rollout_is": "token", "rollout_is_threshold": 1.1}


def _close(got, grad, want, want_grad, tol=1e-9):
    assert abs(got - want) <= tol * max(1.0, abs(want)), (got, want)
    assert float((grad - want_grad).abs().max()) <= tol * max(1.0, float(want_grad.abs().max()))


def _fn(policy_loss_type):
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    return PolicyLossRegistry.get(policy_loss_type)


def test_decoupled_ppo_equals_the_core_with_the_rollout_log_probs(registered):
    batch = make_batch()
    config = algorithm_config("decoupled_ppo", "token_mean")
    hparams = core_hparams("decoupled_ppo", config)
    want, want_grad, _ = core_step("decoupled_ppo", batch, hparams, rollout_log_probs=batch["rollout_logprobs"])
    plain, _, _ = core_step("grpo", batch, {**hparams, "reduction": "token-mean"})
    assert abs(want - plain) > 1e-4  # the behaviour weight acts on this batch
    got, grad = skyrl_step(_fn("decoupled_ppo"), batch, config, dp_size=2, micro_batches=2, rollout=True)
    _close(got, grad, want, want_grad)


def test_a_core_correction_option_takes_effect_as_in_the_core(registered, monkeypatch):
    monkeypatch.setenv(OVERRIDE_ENV, json.dumps(TOKEN_TIS))
    batch = make_batch()
    config = algorithm_config("grpo", "sequence_mean")
    hparams = core_hparams("grpo", config)
    want, want_grad, _ = core_step("grpo", batch, {**hparams, **TOKEN_TIS}, rollout_log_probs=batch["rollout_logprobs"])
    plain, _, _ = core_step("grpo", batch, hparams)
    assert abs(want - plain) > 1e-4  # the truncation acts on this batch
    got, grad = skyrl_step(_fn("grpo"), batch, config, dp_size=2, micro_batches=2, rollout=True)
    _close(got, grad, want, want_grad)


def test_without_rollout_log_probs_the_refusal_names_the_setting(registered):
    from skyrl.train.config import SkyRLTrainConfig

    from gmpo_plugins.adapters.skyrl.entrypoint import check_config

    batch = make_batch()
    with pytest.raises(SkyRLConfigError, match=r"m2po needs .*generator\.sampling_params\.logprobs=1"):
        skyrl_step(_fn("m2po"), batch, algorithm_config("m2po", "token_mean"), rollout=False)
    cfg = SkyRLTrainConfig.from_cli_overrides(
        [
            "trainer.algorithm.policy_loss_type=decoupled_ppo",
            "trainer.algorithm.loss_reduction=token_mean",
            "trainer.logger=console",
            "generator.sampling_params.logprobs=null",
        ]
    )
    with pytest.raises(SkyRLConfigError, match=r"decoupled_ppo needs .*generator\.sampling_params\.logprobs=1"):
        check_config(cfg)  # before SkyRL starts Ray


@pytest.mark.parametrize("core", ["option", "loss"])
def test_skyrls_correction_beside_the_cores_is_refused_by_both_names(registered, monkeypatch, core):
    from skyrl.train.config.config import OffPolicyCorrectionConfig

    if core == "option":
        monkeypatch.setenv(OVERRIDE_ENV, json.dumps(TOKEN_TIS))
    name = "decoupled_ppo" if core == "loss" else "grpo"
    config = algorithm_config(
        name, "token_mean", off_policy_correction=OffPolicyCorrectionConfig(tis_ratio_type="token")
    )
    both = r"trainer\.algorithm\.off_policy_correction\.tis_ratio_type=token .* and " + (
        r"decoupled_ppo's own correction" if core == "loss" else r"rollout_is='token'"
    )
    with pytest.raises(SkyRLConfigError, match=both):
        skyrl_step(_fn(name), make_batch(), config, rollout=True)


def test_rollout_bypass_takes_the_ratio_against_the_rollout_log_probs(registered, monkeypatch):
    """The override the cispo_anchor refusal points other losses to: ``rollout_bypass`` gives the
    core's loss and gradient with old_log_probs := rollout_logprobs."""
    monkeypatch.setenv(OVERRIDE_ENV, json.dumps({"rollout_bypass": True}))
    batch = make_batch()
    config = algorithm_config("grpo", "sequence_mean")
    hparams = core_hparams("grpo", config)
    want, want_grad, _ = core_step("grpo", {**batch, "old_log_probs": batch["rollout_logprobs"]}, hparams)
    plain, _, _ = core_step("grpo", batch, hparams)
    assert abs(want - plain) > 1e-4  # the anchor matters on this batch
    got, grad = skyrl_step(_fn("grpo"), batch, config, dp_size=2, micro_batches=2, rollout=True)
    _close(got, grad, want, want_grad)
