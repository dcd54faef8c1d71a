"""The runner's environment for a framework's processes, which run in the framework's own folder."""

from __future__ import annotations

import os

from gmpo_plugins.frameworks.runner import inherited_pythonpath


def test_relative_pythonpath_entries_are_made_absolute_and_empty_ones_dropped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    absolute = str(tmp_path / "elsewhere")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["tests/skyrl/shims", "", absolute]))
    assert inherited_pythonpath() == [str(tmp_path / "tests" / "skyrl" / "shims"), absolute]


def test_no_pythonpath_adds_nothing(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert inherited_pythonpath() == []
