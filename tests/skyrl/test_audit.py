"""``gmpo-plugins audit`` in the skyrl environment: the live verdicts of SkyRL's own losses
against docs/audit/skyrl.json."""

from __future__ import annotations

from ..audit_cells import assert_cells_unchanged


def test_verdicts_match_committed_cells():
    assert_cells_unchanged("skyrl")
