"""``gmpo-plugins frameworks SPEC --frameworks trl``: TRL's own GRPOTrainer trains the example
spec in a subprocess, with the seeded rollout of examples/trl_cpu (this machine has no GPU);
its logged metrics come back in the run's vocabulary, its first rollout is the one every CPU
stand-in draws, and its parameters after the first step are saved; a trainer that fails or
outlives --timeout leaves an incomplete report and no process behind."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from gmpo_plugins.cli import main
from tests.example_runs import example_in, first_rollout_reward, processes_naming


@pytest.fixture(autouse=True)
def trl_here(monkeypatch):
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_TRL", sys.executable)


def test_the_example_trains_and_its_metrics_come_back_per_step(tmp_path, capsys):
    spec = example_in(tmp_path)
    out = tmp_path / "run"
    assert main(["frameworks", str(spec), "--frameworks", "trl", "--out", str(out)]) == 0
    records = json.loads((out / "records.json").read_text())["runs"]["trl"]
    assert records["complete"] is True and records["standins"].startswith("examples/trl_cpu")
    history = [e for e in json.loads((out / "trl" / "log_history.json").read_text()) if "policy_loss" in e]
    # two optimiser steps per RL step (4 responses, mini-batch 4, 2 epochs): each record aggregates
    # TRL's two entries of its RL step (means of equal weight, the maximum of the maxima)
    assert [r["step"] for r in records["records"]] == [1, 2, 3] and len(history) == 6
    for record, (first, second) in zip(records["records"], zip(history[::2], history[1::2], strict=True), strict=True):
        for key in ("reward", "grad_norm", "entropy"):  # over the entries that logged it (reward: TRL logs
            logged = [entry[key] for entry in (first, second) if key in entry]  # it with the generation)
            assert logged and record[key] == pytest.approx(sum(logged) / len(logged), rel=1e-12)
        assert record["log_ratio_max"] == max(first["log_ratio_max"], second["log_ratio_max"])
        assert record["log_ratio_min"] == min(first["log_ratio_min"], second["log_ratio_min"])
    report = (out / "report.md").read_text()
    assert "Status: complete" in report and "### reward" in report and "scale_rewards=group" in report
    assert "trl: complete" in capsys.readouterr().out
    # the first rollout is the seeded one, on the first prompts of the file (shuffle_dataset=False)
    assert records["records"][0]["reward"] == pytest.approx(first_rollout_reward(tmp_path), rel=1e-6)
    # the parameters after the first step, saved by the stand-in's callback, moved every matrix
    saved = torch.load(out / "trl" / "first_update.pt", weights_only=True)
    from safetensors.torch import load_file

    initial = load_file(str(tmp_path / "model" / "model.safetensors"))
    assert set(saved) == set(initial)
    moved = [name for name in saved if not torch.equal(saved[name], initial[name])]
    assert "lm_head.weight" in moved and "model.layers.0.self_attn.q_proj.weight" in moved


def test_a_trainer_that_fails_leaves_an_incomplete_report(tmp_path, capsys):
    spec = example_in(tmp_path)
    # a reward with the right signature that fails when the trainer calls it
    (tmp_path / "reward.py").write_text("def reward(response, answer):\n    raise RuntimeError('no score')\n")
    out = tmp_path / "run"
    assert main(["frameworks", str(spec), "--frameworks", "trl", "--out", str(out)]) == 1
    report = (out / "report.md").read_text()
    assert "Status: INCOMPLETE" in report and "| trl | incomplete: " in report
    assert "RuntimeError: no score" in report
    run = json.loads((out / "records.json").read_text())["runs"]["trl"]
    assert run["complete"] is False and run["records"] == [] and run["standins"].startswith("examples/trl_cpu")
    assert "trl: INCOMPLETE" in capsys.readouterr().out


def test_a_trainer_past_its_timeout_is_ended_with_its_processes(tmp_path):
    spec = example_in(tmp_path)
    out = tmp_path / "run"
    assert main(["frameworks", str(spec), "--frameworks", "trl", "--out", str(out), "--timeout", "1"]) == 1
    assert "incomplete: " in (out / "report.md").read_text() and "stopped after 1 s" in (out / "report.md").read_text()
    assert processes_naming(str(out / "trl" / "train_trl.py")) == []
