"""Unsupported OpenRLHF versions give an error naming the supported range."""

from __future__ import annotations

import types

import pytest
import torch

from gmpo_plugins.adapters.openrlhf import SUPPORTED, UnsupportedOpenRLHFVersionError, check_version, install, version
from gmpo_plugins.adapters.openrlhf.patch import is_patched, patch_policy_loss


def test_supported_range():
    assert SUPPORTED == ">=0.11.2,<0.12"
    assert check_version("0.11.2") == "0.11.2"
    assert check_version("0.11.9") == "0.11.9"
    for old_or_new in ("0.11.1", "0.11.0", "0.10.4", "0.12.0"):
        message = rf"OpenRLHF {old_or_new} is not supported.*{SUPPORTED}"
        with pytest.raises(UnsupportedOpenRLHFVersionError, match=message):
            check_version(old_or_new)


def test_missing_openrlhf(monkeypatch):
    monkeypatch.setattr(version, "installed_version", lambda: None)
    with pytest.raises(UnsupportedOpenRLHFVersionError, match=r"OpenRLHF is not installed.*>=0\.11\.2,<0\.12"):
        install()


def test_patch_refuses_an_unsupported_version_before_touching_the_class(pristine_loss_module, monkeypatch):
    monkeypatch.setattr(version, "installed_version", lambda: "0.11.1")
    original = pristine_loss_module.PolicyLoss.__init__
    with pytest.raises(UnsupportedOpenRLHFVersionError, match=r"0\.11\.1 is not supported"):
        patch_policy_loss(pristine_loss_module)
    assert pristine_loss_module.PolicyLoss.__init__ is original and not is_patched(pristine_loss_module.PolicyLoss)


def test_patch_refuses_another_policy_loss_signature():
    class PolicyLoss(torch.nn.Module):  # OpenRLHF 0.11.1's constructor (returns a 4-tuple)
        def __init__(
            self,
            clip_eps_low=0.2,
            clip_eps_high=0.2,
            dual_clip=None,
            token_level_loss=True,
            policy_loss_type="ppo",
            enable_vllm_is_correction=False,
            vllm_is_truncated_threshold=None,
            vllm_is_correction_type="tis",
        ):
            super().__init__()

        def forward(
            self,
            log_probs,
            old_log_probs,
            advantages,
            action_mask=None,
            rollout_log_probs=None,
            dp_size=1,
            batch_num_tokens=None,
            global_batch_size=None,
        ):
            raise AssertionError

    module = types.ModuleType("openrlhf.models.loss")
    module.PolicyLoss = PolicyLoss
    with pytest.raises(UnsupportedOpenRLHFVersionError, match=r"PolicyLoss.__init__ has parameters .*enable_vllm"):
        patch_policy_loss(module)
