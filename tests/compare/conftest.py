"""Shared fixtures: one 2-step default compare run, reused by several tests."""

from pathlib import Path

import pytest

from gmpo_plugins.cli.main import main


@pytest.fixture(scope="session")
def two_step_report(tmp_path_factory) -> Path:
    """``gmpo-plugins compare --seeds 1 --steps 2`` with every other option at its default."""
    out = tmp_path_factory.mktemp("report")
    assert main(["compare", "--seeds", "1", "--steps", "2", "--out", str(out)]) == 0
    return out
