"""``gmpo-plugins audit`` in the skyrl environment: the live verdicts of SkyRL's own losses
against docs/audit/skyrl.json."""

from __future__ import annotations

from ..audit_cells import assert_cells_unchanged


def test_verdicts_match_committed_cells():
    assert_cells_unchanged("skyrl")


def test_section_settings_reach_skyrls_nested_configs():
    """A translation's ``<section>.<field>`` (a dotted name) sets SkyRL's nested algorithm config."""
    from skyrl.train.config import AlgorithmConfig

    from gmpo_plugins.compare.audit.callers.skyrl import algorithm_config

    config = algorithm_config(AlgorithmConfig, "sapo", {"sapo.tau_pos": 2.5, "eps_clip_low": 0.3})
    assert (config.policy_loss_type, config.sapo.tau_pos, config.eps_clip_low) == ("sapo", 2.5, 0.3)
