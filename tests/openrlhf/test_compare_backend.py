"""The OpenRLHF backend of ``gmpo-plugins compare``/``parity`` (gmpo_plugins.compare.backends.openrlhf):
registry losses through the patched PolicyLoss match the core on parity's hard cases, and
OpenRLHF's own ppo/gspo equal our grpo/gspo wherever both compute in float32 within the guard."""

from __future__ import annotations

import pytest

from gmpo_plugins.compare.backends.base import load_backend
from gmpo_plugins.compare.backends.openrlhf import parity_targets
from gmpo_plugins.compare.parity.harness import compare_target, parity_cases
from gmpo_plugins.core.registry import get_loss

from ..registry_names import adapter_losses, builtin_losses, refused_losses


@pytest.fixture(scope="module")
def targets(loss_module):
    adapter, own = parity_targets()
    return adapter, own


def test_backend_supports_every_expressible_loss(loss_module):
    backend = load_backend("openrlhf")
    assert backend.name == "openrlhf"
    supported = {name for name in builtin_losses() if backend.supports(name)}
    # what PolicyLoss's arguments lack goes through the override; a required input the adapter
    # does not pass refuses the loss (adapters.inputs), and so does one a PolicyLossCall does not
    # carry (the rollout log-probs: the backend builds PolicyLoss without the IS-correction flag)
    expected = {name for name in builtin_losses() if not get_loss(name).requires}
    assert supported == expected - set(refused_losses("openrlhf"))


@pytest.mark.parametrize(
    "name", [name for name in builtin_losses() if name in adapter_losses("openrlhf") and not get_loss(name).requires]
)
def test_adapter_matches_the_core_on_parity_cases(targets, name):
    row = compare_target(targets[0], name, parity_cases())
    assert row.ok, row.failures
    assert row.metric_key  # clip_frac / ppo_kl / policy_loss were compared


@pytest.mark.parametrize(
    ("name", "cases"),
    [
        ("grpo", ("near", "far", "guard", "zero_adv")),
        ("dapo", ("near", "far", "guard", "zero_adv")),
        ("gspo", ("near", "far", "zero_adv")),
    ],
)
def test_openrlhf_own_ppo_and_gspo_equal_ours(targets, name, cases):
    """OpenRLHF's ppo == our grpo/dapo, its gspo == our gspo, except where they differ by
    design: bf16 (OpenRLHF computes in the input dtype) and, for gspo, the +-20 guard."""
    row = compare_target(targets[1], name, [case for case in parity_cases() if case.name in cases])
    assert row.ok, row.failures
    other = compare_target(targets[1], name, [case for case in parity_cases() if case.name not in cases])
    assert not other.ok  # the documented differences are real
