"""OpenRLHF's ``rollout_log_probs`` reach the registry loss as ``LossInputs.rollout_log_probs``
through the patched ``PolicyLoss`` (``adapters/openrlhf/options.py``, rollout log-probs): a loss
that reads them and the core's correction options equal the core called directly, the missing
flag and the correction applied twice are refused at construction, naming the flags."""

from __future__ import annotations

import json

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.openrlhf import OpenRLHFConfigError
from tests.openrlhf.batches import counts, openrlhf_batch

PASS_ONLY = {
    "is_correction_level": "token",
    "is_correction_mode": "clip",
    "is_correction_gating": "ratio",
    "is_correction_threshold": [1.0, 1.0],
}
TOKEN_TIS = {"rollout_is": "token", "rollout_is_threshold": 1.02, "rollout_is_threshold_low": 0.98}


def _through_openrlhf(cls, policy_loss_type, batch, **correction):
    module = cls(clip_eps_low=0.2, clip_eps_high=0.2, policy_loss_type=policy_loss_type, **correction)
    leaf = batch.leaf.detach().clone().requires_grad_(True)
    loss, *_ = module(
        leaf * batch.action_mask,
        batch.old_log_probs,
        batch.advantages,
        action_mask=batch.action_mask,
        rollout_log_probs=batch.rollout_log_probs,
        **counts(batch),
    )
    loss.backward()
    return loss.detach(), leaf.grad


def _core(name, batch, **hparams):
    leaf = batch.leaf.detach().clone().requires_grad_(True)
    info = counts(batch)
    out = get_loss(name)(
        LossInputs(
            leaf * batch.action_mask,
            batch.old_log_probs,
            batch.advantages,
            mask=batch.action_mask,
            rollout_log_probs=batch.rollout_log_probs,
        ),
        BatchInfo(info["dp_size"], info["global_batch_size"], info["batch_num_tokens"]),
        **hparams,
    )
    out.loss.backward()
    return out.loss.detach(), leaf.grad


@pytest.mark.parametrize("name", ["decoupled_ppo", "m2po"])
def test_a_loss_reading_rollout_log_probs_equals_the_core(loss_module, name):
    # spread 0.6 and a 0.05 rollout gap: some tokens clip, and the behaviour weight is not 1
    batch = openrlhf_batch(seed=5, dtype=torch.float64, spread=0.6)
    got = _through_openrlhf(loss_module.PolicyLoss, f"gmpo_plugins.{name}", batch, **PASS_ONLY)
    want = _core(name, batch, eps_low=0.2, eps_high=0.2)
    without = _core("grpo", batch, eps_low=0.2, eps_high=0.2)
    assert abs(float(want[0]) - float(without[0])) > 1e-4  # the rollout log-probs change the loss
    torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[1], want[1], rtol=1e-12, atol=1e-12)


def test_a_core_correction_option_takes_effect_as_in_the_core(loss_module, monkeypatch):
    monkeypatch.setenv(OVERRIDE_ENV, json.dumps(TOKEN_TIS))
    batch = openrlhf_batch(seed=5, dtype=torch.float64)
    got = _through_openrlhf(loss_module.PolicyLoss, "gmpo_plugins.grpo", batch, **PASS_ONLY)
    want = _core("grpo", batch, eps_low=0.2, eps_high=0.2, reduction="token-mean", **TOKEN_TIS)
    plain = _core("grpo", batch, eps_low=0.2, eps_high=0.2, reduction="token-mean")
    assert abs(float(want[0]) - float(plain[0])) > 1e-5  # the truncation acts on this batch
    torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[1], want[1], rtol=1e-12, atol=1e-12)


def test_without_the_is_correction_flag_the_refusal_names_it(loss_module, monkeypatch):
    with pytest.raises(OpenRLHFConfigError, match=r"decoupled_ppo needs .*--algo.advantage.is_correction_level"):
        loss_module.PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.2, policy_loss_type="gmpo_plugins.decoupled_ppo")
    monkeypatch.setenv(OVERRIDE_ENV, json.dumps({"rollout_rs": "token_k3", "rollout_rs_threshold": 0.1}))
    with pytest.raises(OpenRLHFConfigError, match=r"rollout_rs='token_k3' needs .*is_correction_threshold 1 1"):
        loss_module.PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.2, policy_loss_type="gmpo_plugins.grpo")


@pytest.mark.parametrize("core", ["option", "loss"])
def test_openrlhfs_correction_beside_the_cores_is_refused_by_both_names(loss_module, monkeypatch, core):
    name = "gmpo_plugins.decoupled_ppo" if core == "loss" else "gmpo_plugins.grpo"
    if core == "option":
        monkeypatch.setenv(OVERRIDE_ENV, json.dumps(TOKEN_TIS))
    both = r"--algo.advantage.is_correction_level token --algo.advantage.is_correction_mode mask .* and " + (
        r"decoupled_ppo's own correction \(rollout_is='token'" if core == "loss" else r"rollout_is='token'"
    )
    with pytest.raises(OpenRLHFConfigError, match=both):
        loss_module.PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.2, policy_loss_type=name, is_correction_level="token")


def test_a_call_that_does_not_read_them_gets_none(loss_module):
    """gmpo with OpenRLHF's pass-only correction: the rollout log-probs reach no part of the call
    (no correction metric, no weights), even a -inf one at a valid token, which the loss would
    otherwise have to turn into a non-finite loss."""
    batch = openrlhf_batch(seed=5, dtype=torch.float64)
    row, column = (int(i) for i in batch.action_mask.nonzero()[0])  # a valid token
    batch.rollout_log_probs[row, column] = -torch.inf
    got = _through_openrlhf(loss_module.PolicyLoss, "gmpo_plugins.gmpo", batch, **PASS_ONLY)
    leaf = batch.leaf.detach().clone().requires_grad_(True)
    info = counts(batch)
    plain = get_loss("gmpo")(
        LossInputs(leaf * batch.action_mask, batch.old_log_probs, batch.advantages, mask=batch.action_mask),
        BatchInfo(info["dp_size"], info["global_batch_size"], info["batch_num_tokens"]),
        eps_low=0.2,
        eps_high=0.2,
    )
    plain.loss.backward()
    assert bool(torch.isfinite(got[0]))
    torch.testing.assert_close(got[0], plain.loss.detach(), rtol=0, atol=0)
    torch.testing.assert_close(got[1], leaf.grad, rtol=0, atol=0)
