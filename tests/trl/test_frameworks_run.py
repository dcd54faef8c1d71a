"""``gmpo-plugins frameworks SPEC --frameworks trl``: TRL's own GRPOTrainer trains the example
spec in a subprocess; its logged metrics come back in the run's vocabulary; a trainer that
fails or outlives --timeout leaves an incomplete report and no process behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gmpo_plugins.cli import main

from .test_frameworks_translation import example_in


@pytest.fixture(autouse=True)
def trl_here(monkeypatch):
    import sys

    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_TRL", sys.executable)


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return [pid for pid in found if pid != os.getpid()]


def test_the_example_trains_and_its_metrics_come_back_per_step(tmp_path, capsys):
    spec = example_in(tmp_path, **{'dtype = "bfloat16"': 'dtype = "float32"'})
    out = tmp_path / "run"
    assert main(["frameworks", str(spec), "--frameworks", "trl", "--out", str(out)]) == 0
    records = json.loads((out / "records.json").read_text())["runs"]["trl"]
    assert records["complete"] is True
    history = [e for e in json.loads((out / "trl" / "log_history.json").read_text()) if "policy_loss" in e]
    # one optimiser step per RL step (4 responses, mini-batch 4): the records are TRL's own values
    assert [r["step"] for r in records["records"]] == [1, 2, 3]
    for record, entry in zip(records["records"], history, strict=True):
        assert record["reward"] == entry["reward"] and record["grad_norm"] == entry["grad_norm"]
        assert record["log_ratio_max"] == entry["log_ratio_max"] and record["entropy"] == entry["entropy"]
    report = (out / "report.md").read_text()
    assert "Status: complete" in report and "### reward" in report and "scale_rewards=group" in report
    assert "trl: complete" in capsys.readouterr().out


def test_a_trainer_that_fails_leaves_an_incomplete_report(tmp_path, capsys):
    spec = example_in(tmp_path, **{'dtype = "bfloat16"': 'dtype = "float32"'})
    # a reward with the right signature that fails when the trainer calls it
    (tmp_path / "reward.py").write_text("def reward(response, answer):\n    raise RuntimeError('no score')\n")
    out = tmp_path / "run"
    assert main(["frameworks", str(spec), "--frameworks", "trl", "--out", str(out)]) == 1
    report = (out / "report.md").read_text()
    assert "Status: INCOMPLETE" in report and "| trl | incomplete: " in report
    assert "RuntimeError: no score" in report
    assert json.loads((out / "records.json").read_text())["runs"]["trl"] == {
        "complete": False,
        "standins": "",
        "records": [],
    }
    assert "trl: INCOMPLETE" in capsys.readouterr().out


def test_a_trainer_past_its_timeout_is_ended_with_its_processes(tmp_path):
    spec = example_in(tmp_path, **{'dtype = "bfloat16"': 'dtype = "float32"'})
    out = tmp_path / "run"
    assert main(["frameworks", str(spec), "--frameworks", "trl", "--out", str(out), "--timeout", "1"]) == 1
    assert "incomplete: " in (out / "report.md").read_text() and "stopped after 1 s" in (out / "report.md").read_text()
    assert processes_mentioning(str(out / "trl" / "train_trl.py")) == []
