"""``gmpo-plugins frameworks SPEC --frameworks verl``: verl's own default trainer (v1 PPOTrainerSync.fit,
with the CPU stand-ins of examples/verl_cpu where there is no GPU) trains the example spec
in a subprocess; verl's file-logger metrics come back per RL step in the run's vocabulary;
a verl run that fails leaves an incomplete report, the other framework's results kept,
and no process of its Ray instance behind."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from pathlib import Path

import pytest

from gmpo_plugins.cli import main
from gmpo_plugins.frameworks.translate import TRANSLATORS
from tests.example_runs import example_in, first_rollout_reward, processes_naming

# every vocabulary metric verl logs on CPU for the example (kl: use_kl_loss is off; peak memory:
# the CPU platform reports none)
LOGGED = (
    "reward",
    "policy_loss",
    "clip_frac_low",
    "clip_frac_high",
    "log_ratio_min",
    "log_ratio_max",
    "entropy",
    "grad_norm",
    "step_time",
)


def leftovers(out: Path) -> list[int]:
    """Processes whose command line names the run's folder or the Ray folder verl was given
    (read from the command in verl's output.log); that Ray folder must be gone too."""
    command = (out / "verl" / "output.log").read_text().split("\n$ ")[-1].splitlines()[0]
    ray_dir = re.search(r"_temp_dir=(\S+)", command).group(1)
    assert not Path(ray_dir).exists()
    return processes_naming(str(out), ray_dir)


def inject_a_bad_override(monkeypatch) -> None:
    """verl's translation with one more override, of a key verl's config does not have."""
    translate = TRANSLATORS["verl"]

    def with_a_bad_override(spec):
        launch = translate(spec)
        return dataclasses.replace(launch, argv=(*launch.argv, "trainer.no_such_setting=1"))

    monkeypatch.setitem(TRANSLATORS, "verl", with_a_bad_override)


def trl_python() -> str:
    """TRL's interpreter (GMPO_PLUGINS_PYTHON_TRL or .nox/trl): TRL and verl 0.9.1 do not share
    a virtualenv (verl imports trl.experimental.ppo, which trl 1.16 lacks, when trl is there)."""
    from gmpo_plugins.compare.backends.base import BackendError, resolve_runner

    try:
        return resolve_runner("trl").python or pytest.skip("TRL is in this interpreter")
    except BackendError:
        pytest.skip("no TRL virtualenv here (set GMPO_PLUGINS_PYTHON_TRL or run nox -r -s trl)")


@pytest.fixture(autouse=True)
def verl_here(monkeypatch):
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_VERL", sys.executable)


def test_the_example_trains_in_verl_and_its_metrics_come_back_per_step(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["frameworks", str(example_in(tmp_path)), "--frameworks", "verl", "--out", str(out)]) == 0
    result = json.loads((out / "records.json").read_text())["runs"]["verl"]
    assert result["complete"] is True and result["standins"].startswith("examples/verl_cpu")
    logged = {}
    for line in (out / "verl" / "metrics.jsonl").read_text().splitlines():
        entry = json.loads(line)
        logged[entry["step"]] = entry["data"]
    # the spec's 3 steps, one record per verl step, each value verl's own
    assert [record["step"] for record in result["records"]] == [1, 2, 3] == sorted(logged)
    for record in result["records"]:
        data = logged[record["step"]]
        assert set(record) == {"step", *LOGGED}
        assert all(math.isfinite(record[name]) for name in LOGGED)
        assert record["reward"] == data["critic/score/mean"] and record["grad_norm"] == data["actor/grad_norm"]
        assert record["clip_frac_low"] == data["actor/gmpo/clip_frac_low"]
        # our loss ran: the adapter's metrics (actor/gmpo/...) are in verl's log of every step
        assert data["actor/gmpo/seq_weight_mean"] > 0 and record["grad_norm"] > 0
    report = (out / "report.md").read_text()
    assert "Status: complete" in report and "| verl | complete |" in report and "### grad_norm" in report
    assert "examples/verl_cpu" in capsys.readouterr().out
    assert leftovers(out) == []  # verl's driver and Ray's services ended, Ray's folder removed
    # the first rollout is the seeded one every CPU stand-in draws, on the first prompts of the file
    assert result["records"][0]["reward"] == pytest.approx(first_rollout_reward(tmp_path), rel=1e-6)
    assert (out / "verl" / "weights" / "weights_0_1.pt").is_file()  # the parameters after step 1


def test_a_verl_run_that_fails_is_incomplete_and_leaves_no_process(tmp_path, monkeypatch, capsys):
    inject_a_bad_override(monkeypatch)
    out = tmp_path / "run"
    assert main(["frameworks", str(example_in(tmp_path)), "--frameworks", "verl", "--out", str(out)]) == 1
    report = (out / "report.md").read_text()
    assert "Status: INCOMPLETE" in report and "| verl | incomplete: python3 ... exit status" in report
    assert "no_such_setting" in report  # the end of verl's output names the setting
    assert json.loads((out / "records.json").read_text())["runs"]["verl"]["records"] == []
    assert "verl: INCOMPLETE" in capsys.readouterr().out
    assert leftovers(out) == []


def test_a_failed_verl_run_keeps_trls_results(tmp_path, monkeypatch):
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_TRL", trl_python())
    inject_a_bad_override(monkeypatch)
    spec = example_in(tmp_path)
    out = tmp_path / "run"
    assert main(["frameworks", str(spec), "--frameworks", "verl,trl", "--out", str(out)]) == 1
    results = json.loads((out / "records.json").read_text())["runs"]
    assert results["verl"]["complete"] is False and results["verl"]["records"] == []
    assert results["trl"]["complete"] is True and [r["step"] for r in results["trl"]["records"]] == [1, 2, 3]
    report = (out / "report.md").read_text()
    assert "Status: INCOMPLETE" in report and "| trl | complete |" in report and "### reward" in report
