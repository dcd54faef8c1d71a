"""The SkyRL backend of ``gmpo-plugins compare`` / ``parity``: registry losses through SkyRL's
PolicyLossRegistry and advantage pre-scaling equal the core on the parity command's hard
cases, whole and split; SkyRL's own regular/gspo are references (reported, not asserted)."""

from __future__ import annotations

import pytest

from gmpo_plugins import get_loss, list_losses
from gmpo_plugins.compare.backends.base import BackendError, load_backend
from gmpo_plugins.compare.backends.skyrl import SkyRLBackend, algorithm_fields
from gmpo_plugins.compare.parity.harness import ParityTarget, compare_target, discover_targets, parity_cases

from ..registry_names import adapter_losses, refused_losses


def test_parity_discovers_the_skyrl_adapter_and_references():
    targets, _ = discover_targets()
    by_label = {t.label: t for t in targets}
    assert by_label["skyrl adapter"].kind == "adapter" and isinstance(by_label["skyrl adapter"].backend, SkyRLBackend)
    assert by_label["skyrl regular/gspo (own)"].kind == "reference"
    assert isinstance(load_backend("skyrl"), SkyRLBackend)


@pytest.mark.parametrize(
    "loss_name",  # a PolicyLossCall carries no optional input (decoupled_ppo's rollout log-probs)
    [name for name in adapter_losses("skyrl") if get_loss(name).linear_in_advantages and not get_loss(name).requires],
)
def test_skyrl_backend_matches_the_core_on_parity_cases(loss_name):
    backend = SkyRLBackend()
    assert backend.supports(loss_name)
    row = compare_target(ParityTarget("skyrl adapter", "adapter", backend), loss_name, parity_cases())
    assert row.ok, row.failures
    assert row.metric_key  # metrics were compared


def test_losses_not_linear_in_the_advantages_are_not_offered():
    backend = SkyRLBackend()
    assert [spec.name for spec in list_losses() if not backend.supports(spec.name)] == [
        spec.name
        for spec in list_losses()
        if not spec.linear_in_advantages or spec.name in refused_losses("skyrl") or spec.requires
    ]


def test_skyrl_regular_equals_grpo_except_in_bfloat16():
    """SkyRL's own token-level PPO clip agrees with our grpo on the float32 cases; in
    bfloat16 it computes in the input dtype (the core promotes to float32)."""
    own = SkyRLBackend(own=True)
    assert own.supports("grpo") and own.supports("gspo") and not own.supports("gmpo")
    row = compare_target(ParityTarget("skyrl own", "reference", own), "grpo", parity_cases())
    assert row.failures and all("bf16" in failure for failure in row.failures)


def test_hyper_parameters_skyrl_cannot_carry_are_refused():
    assert algorithm_fields("gmpo", {"eps_low": 0.3, "eps_high": 0.5, "kl_beta": 0.0}, width=24) == {
        "eps_clip_low": 0.3,
        "eps_clip_high": 0.5,
        "loss_reduction": "sequence_mean",
        "max_seq_len": 24,
    }
    with pytest.raises(BackendError, match="kl_beta=0.1"):
        algorithm_fields("gmpo", {"kl_beta": 0.1}, width=24)
    with pytest.raises(BackendError, match="dual_clip=3.0"):
        algorithm_fields("grpo", {"dual_clip": 3.0, "reduction": "token-mean"}, width=24)
