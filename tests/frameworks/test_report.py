"""report.md and steps.png from hand-made runs: one table per metric, one line per framework."""

from __future__ import annotations

import json

import pytest

from gmpo_plugins.frameworks.launch import Launch
from gmpo_plugins.frameworks.plots import plotted_metrics
from gmpo_plugins.frameworks.report import write_report
from gmpo_plugins.frameworks.runner import FrameworkRun

pytest.importorskip("matplotlib")

VERL = FrameworkRun(
    "verl",
    True,
    12.0,
    records=[{"step": 1, "reward": 0.5, "grad_norm": 2.0}, {"step": 2, "reward": 0.75, "grad_norm": float("nan")}],
    standins="examples/verl_cpu (CPU platform)",
)
TRL = FrameworkRun("trl", True, 3.0, records=[{"step": 1, "reward": 0.25, "entropy": 3.0}])
LAUNCHES = [Launch("verl", ("python3",)), Launch("trl", ("python3",))]


def test_the_report_has_a_plot_and_a_table_per_metric(tmp_path):
    assert write_report(tmp_path, "spec.toml", [VERL, TRL], LAUNCHES) is True
    report = (tmp_path / "report.md").read_text()
    assert "![one line per framework per metric](steps.png)" in report
    assert (tmp_path / "steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # panels: the metrics some framework logged, in vocabulary order
    assert plotted_metrics([VERL, TRL]) == ["reward", "entropy", "grad_norm"]
    assert "### reward\n\n| step | verl | trl |\n|---|---|---|\n| 1 | 0.5 | 0.25 |\n| 2 | 0.75 |  |" in report
    assert "| verl | complete | 12.0 | 2 | examples/verl_cpu (CPU platform) |" in report
    assert "| trl | complete | 3.0 | 1 | none |" in report
    assert json.loads((tmp_path / "records.json").read_text())["verl"]["standins"] == VERL.standins


def test_no_metrics_no_plot(tmp_path):
    failed = FrameworkRun("verl", False, 1.0, failure="python3 ... exit status 1\nboom")
    assert write_report(tmp_path, "spec.toml", [failed], LAUNCHES[:1]) is False
    assert "(no plot: no metrics)" in (tmp_path / "report.md").read_text()
    assert not (tmp_path / "steps.png").exists()
