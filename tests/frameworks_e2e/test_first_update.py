"""The first update, identical across trainers: the example spec through verl's RayPPOTrainer,
OpenRLHF's train_ppo_ray and TRL's GRPOTrainer (each in its own virtualenv, on the CPU
stand-ins, which all draw the first rollout from examples/seeded_generation.py), then
``gmpo_plugins.frameworks.first_update`` on the parameters each left after its first step.

The example is float32 with AdamW's first step made gradient-sized (eps = 100: lr / eps * g) and no
clipping in effect, so a gradient that differs by a factor or by 1e-4 of itself moves the update
by as much. One RL step each: OpenRLHF always shuffles its prompts, so over several steps its first
batch is a random draw of the run's prompts (a named difference); with one step it is the same
two prompts as the others'.

Run by ``nox -s frameworks_e2e`` with ``GMPO_PLUGINS_PYTHON_{VERL,OPENRLHF,TRL}`` naming the three
virtualenvs.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from gmpo_plugins.cli import main
from gmpo_plugins.frameworks.first_update import TOLERANCE
from gmpo_plugins.frameworks.translate import TRANSLATORS
from tests.example_runs import example_in, first_rollout_reward

ONE_STEP = {"steps = 3": "steps = 1"}
ALIGNED = {**ONE_STEP, "advantage_std_norm = true": "advantage_std_norm = false"}
TRL_EPSILON = "advantages: verl (r - group mean) / (group std + 1e-6); trl (r - group mean) / (group std + 1e-4)"


def run(folder, frameworks: str, **replace: str) -> tuple[int, dict, str]:
    """Exit status, records.json and report.md of the example (``replace``d) through ``frameworks``."""
    spec = example_in(folder, **replace)
    out = folder / "run"
    status = main(["frameworks", str(spec), "--frameworks", frameworks, "--out", str(out)])
    return status, json.loads((out / "records.json").read_text()), (out / "report.md").read_text()


@pytest.fixture(scope="module")
def aligned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("aligned")
    return folder, *run(folder, "verl,openrlhf,trl", **ALIGNED)


def test_the_first_update_is_the_same_in_verl_openrlhf_and_trl(aligned):
    folder, status, records, report = aligned
    assert status == 0, report
    assert all(run["complete"] and run["standins"] for run in records["runs"].values())
    pairs = {tuple(pair["frameworks"]): pair for pair in records["first_update"]}
    assert sorted(pairs) == [("openrlhf", "trl"), ("verl", "openrlhf"), ("verl", "trl")]
    expected_reward = first_rollout_reward(folder)
    for pair in pairs.values():
        assert pair["rel"] <= TOLERANCE and pair["identical"] is True, pair
        assert pair["causes"] == []
        assert pair["step_one_rewards"] == pytest.approx([expected_reward] * 2, rel=1e-6)
    assert report.count(" | identical | ") == 3


def test_trls_advantage_epsilon_is_the_named_difference(tmp_path):
    """With group-std advantages TRL adds 1e-4 to the std where verl adds 1e-6: the report names
    it; the aligned run (r - group mean, no epsilon) shows the difference gone."""
    status, records, report = run(tmp_path, "verl,trl", **ONE_STEP)
    assert status == 0, report
    (pair,) = records["first_update"]
    assert pair["identical"] is False and pair["causes"] == [TRL_EPSILON]
    # the same rollout (same rewards); a difference of the order of 1e-4 / std, not of the update
    assert pair["step_one_rewards"][0] == pytest.approx(pair["step_one_rewards"][1], rel=1e-6)
    assert 1e-5 < pair["rel"] < 1e-2
    assert f"| verl / trl | {pair['rel']:.2e} | 1e-05 | DIFFERENT |" in report and TRL_EPSILON in report


def test_a_setting_flipped_in_one_framework_is_flagged(tmp_path, monkeypatch):
    """TRL's translation with the group-std scaling the spec turned off: the runs complete, and
    the first update is flagged different with no named behaviour to explain it."""
    translate = TRANSLATORS["trl"]

    def with_std_scaling(spec):
        launch = translate(spec)
        script = launch.files["train_trl.py"]
        assert "'scale_rewards': 'none'" in script
        flipped = script.replace("'scale_rewards': 'none'", "'scale_rewards': 'group'")
        return dataclasses.replace(launch, files={**launch.files, "train_trl.py": flipped})

    monkeypatch.setitem(TRANSLATORS, "trl", with_std_scaling)
    status, records, report = run(tmp_path, "verl,trl", **ALIGNED)
    assert status == 0, report
    (pair,) = records["first_update"]
    assert pair["identical"] is False and pair["causes"] == [] and pair["rel"] > 1e-2
    assert "DIFFERENT" in report and "none of the named behaviours differs: unexplained" in report
