"""OpenRLHF versions: outside the tested range one warning naming it; another PolicyLoss
signature refuses registry losses only, and OpenRLHF's own ppo/gspo run untouched."""

from __future__ import annotations

import types

import pytest
import torch

from gmpo_plugins.adapters import upstream
from gmpo_plugins.adapters.openrlhf import SUPPORTED, UnsupportedOpenRLHFVersionError, check_version, install, version
from gmpo_plugins.adapters.openrlhf.patch import is_patched, patch_policy_loss, refusal
from gmpo_plugins.adapters.upstream import UntestedFrameworkWarning


@pytest.fixture
def fresh_process(monkeypatch):
    """No UntestedFrameworkWarning given yet (it is given once per process)."""
    monkeypatch.setattr(upstream, "_warned", set())


def test_tested_range(fresh_process, recwarn):
    assert SUPPORTED == ">=0.11.2,<0.12"
    assert check_version("0.11.2") == "0.11.2" and check_version("0.11.9") == "0.11.9"
    assert not recwarn.list


def test_outside_the_tested_range_warns_once_naming_it(fresh_process):
    with pytest.warns(UntestedFrameworkWarning) as record:
        assert check_version("0.12.0") == "0.12.0"
        check_version("0.12.0")
    (warning,) = record
    assert str(warning.message).startswith(
        "gmpo_plugins: openrlhf 0.12.0 is outside the range its adapter was tested with (openrlhf>=0.11.2,<0.12)"
    )


def test_missing_openrlhf(monkeypatch):
    monkeypatch.setattr(version, "installed_version", lambda distribution: None)
    with pytest.raises(UnsupportedOpenRLHFVersionError, match=r"OpenRLHF is not installed.*>=0\.11\.2,<0\.12"):
        install()


def test_an_untested_version_with_the_same_signature_is_patched_with_a_warning(
    pristine_loss_module, fresh_process, monkeypatch
):
    monkeypatch.setattr(version, "installed_version", lambda distribution: "0.12.1")
    with pytest.warns(UntestedFrameworkWarning, match=r"openrlhf 0\.12\.1 is outside"):
        patch_policy_loss(pristine_loss_module)
    assert is_patched(pristine_loss_module.PolicyLoss)


def _changed_signature(pristine_loss_module):
    """OpenRLHF's real PolicyLoss with a simulated signature change: a new constructor keyword."""

    class PolicyLoss(pristine_loss_module.PolicyLoss):
        def __init__(self, *args, new_option=None, **kwargs):
            super().__init__(*args, **kwargs)

    return types.SimpleNamespace(PolicyLoss=PolicyLoss)


def test_another_signature_refuses_registry_losses_only(pristine_loss_module):
    module = _changed_signature(pristine_loss_module)
    patch_policy_loss(module)
    cls = module.PolicyLoss
    assert not is_patched(cls) and "PolicyLoss.__init__ has parameters" in refusal(cls)
    for args, kwargs in (((0.4, 0.4), {"policy_loss_type": "gmpo"}), ((0.4, 0.4, None, True, "gmpo_plugins.grpo"), {})):
        with pytest.raises(UnsupportedOpenRLHFVersionError) as error:
            cls(*args, **kwargs)
        assert "PolicyLoss.__init__ has parameters ('self', 'args', 'new_option', 'kwargs')" in str(error.value)
        assert "cannot run" in str(error.value)
    # OpenRLHF's own ppo and gspo: the same numbers as the pristine class, to the bit
    g = torch.Generator().manual_seed(0)
    log_probs, old = -torch.rand(3, 5, generator=g), -torch.rand(3, 5, generator=g)
    advantages, mask = torch.randn(3, 5, generator=g), torch.ones(3, 5)
    for loss_type in ("ppo", "gspo"):
        ours = cls(0.2, 0.2, policy_loss_type=loss_type)(log_probs, old, advantages, mask)
        theirs = pristine_loss_module.PolicyLoss(0.2, 0.2, policy_loss_type=loss_type)(log_probs, old, advantages, mask)
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_openrlhf_0_11_1_signature_refuses_registry_losses_only():
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
            self.policy_loss_type = policy_loss_type

    module = types.ModuleType("openrlhf.models.loss")
    module.PolicyLoss = PolicyLoss
    patch_policy_loss(module)
    assert PolicyLoss(policy_loss_type="ppo").policy_loss_type == "ppo"
    with pytest.raises(UnsupportedOpenRLHFVersionError, match=r"PolicyLoss.__init__ has parameters .*enable_vllm"):
        PolicyLoss(policy_loss_type="gmpo")
