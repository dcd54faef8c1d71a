"""The verl backend of ``gmpo-plugins compare`` / ``parity``: registry losses through verl's
policy-loss registry equal the core on the parity command's hard cases, whole and split."""

from __future__ import annotations

import pytest

from gmpo_plugins import list_losses
from gmpo_plugins.compare.backends.base import BackendError, load_backend
from gmpo_plugins.compare.backends.verl import VerlBackend, verl_fields
from gmpo_plugins.compare.parity.harness import ParityTarget, compare_target, discover_targets, parity_cases

from ..registry_names import adapter_losses, refused_losses


def test_parity_discovers_the_verl_backend_as_an_adapter():
    targets, _ = discover_targets()
    verl = [t for t in targets if t.label == "verl adapter"]
    assert len(verl) == 1 and verl[0].kind == "adapter" and isinstance(verl[0].backend, VerlBackend)
    assert isinstance(load_backend("verl"), VerlBackend)


def test_losses_needing_an_input_verl_is_not_given_are_not_offered():
    """The backend offers what the adapter calls: not topr (rewards) nor decoupled_ppo (rollout log-probs)."""
    backend = VerlBackend()
    assert [spec.name for spec in list_losses() if not backend.supports(spec.name)] == refused_losses("verl")
    assert {"topr", "decoupled_ppo", "m2po"} <= set(refused_losses("verl"))


@pytest.mark.parametrize("loss_name", adapter_losses("verl"))
def test_verl_backend_matches_the_core_on_parity_cases(loss_name):
    backend = VerlBackend()
    assert backend.supports(loss_name)
    row = compare_target(ParityTarget("verl adapter", "adapter", backend), loss_name, parity_cases())
    assert row.ok, row.failures
    assert row.metric_key  # metrics were compared


def test_hyper_parameters_verl_cannot_carry_are_refused():
    assert verl_fields("gmpo", {"eps_low": 0.3, "eps_high": 0.5, "kl_beta": 0.0}) == {
        "clip_ratio_low": 0.3,
        "clip_ratio_high": 0.5,
        "loss_agg_mode": "seq-mean-token-mean",
    }
    with pytest.raises(BackendError, match="kl_beta=0.1"):
        verl_fields("gmpo", {"kl_beta": 0.1})
