"""Fixtures of the end-to-end runs: the model, prompts and reward built once per session."""

from __future__ import annotations

import pytest

from tests.openrlhf.e2e.fixtures import build_fixtures


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory):
    return build_fixtures(tmp_path_factory.mktemp("openrlhf-e2e-fixtures"))
