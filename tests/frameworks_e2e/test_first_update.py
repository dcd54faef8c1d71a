"""The first RL step, identical across trainers with the clip acting: the example spec through
verl's v1 trainer (PPOTrainerSync), OpenRLHF's train_ppo_ray and TRL's GRPOTrainer (each in its own virtualenv,
on the CPU stand-ins, which all draw the first rollout from examples/seeded_generation.py), then
``gmpo_plugins.frameworks.first_update`` on the parameters each left after every optimiser step of
the first RL step (``examples/optimiser_steps.py``: a hook on each trainer's optimiser step).

The example is float32 with AdamW's steps made gradient-sized (eps = 100: lr / eps * m) and no
gradient clipping in effect, so a gradient that differs by a factor or by 1e-4 of itself moves the
update by as much. Its RL step is two optimiser steps (one mini-batch of the 4 responses, 2
epochs): in the second the ratios differ from 1 and tokens are clipped (clip fractions above 0 in
every trainer's log). One RL step each: OpenRLHF always shuffles its prompts, so over several
steps its first batch is a random draw of the run's prompts (a named difference); with one step
it is the same two prompts as the others'.

Run by ``nox -s frameworks_e2e`` with ``GMPO_PLUGINS_PYTHON_{VERL,OPENRLHF,TRL}`` naming the three
virtualenvs.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from gmpo_plugins.cli import main
from gmpo_plugins.frameworks.first_update import tolerance
from gmpo_plugins.frameworks.translate import TRANSLATORS
from tests.example_runs import assert_last_step_is_the_synced_one, example_in, first_rollout_reward

ONE_STEP = {"steps = 3": "steps = 1"}
ALIGNED = {**ONE_STEP, "advantage_std_norm = true": "advantage_std_norm = false"}
TRL_EPSILON = "advantages: verl (r - group mean) / (group std + 1e-6); trl (r - group mean) / (group std + 1e-4)"
CHAINED = tolerance("float32", 2)  # two optimiser steps: 3e-5
# group-std advantages, and two mini-batches of 2 responses in one epoch: still two optimiser
# steps, now on different responses
STD_AND_TWO_MINI_BATCHES = {
    **ONE_STEP,
    "mini_batch_size = 4": "mini_batch_size = 2",
    "epochs_per_batch = 2": "epochs_per_batch = 1",
    "seed = 0": "seed = 1",  # TRL's shuffle under seed 0 happens to keep the rollout order's two mini-batches
}
# grpo with a dual clip of 1.05 on 8 responses (4 prompts, one mini-batch, 2 epochs): in the second
# optimiser step some tokens of negative advantage have moved past a ratio of 1.05 (the clip acts
# on a few of them with the 4 responses of the example alone)
DUAL_CLIP = {
    **ALIGNED,
    'loss = "gmpo"': 'loss = "grpo"',
    "prompts_per_step = 2": "prompts_per_step = 4",
    # one forward/backward pass per optimiser step: verl logs the mean of its micro-batches' means
    "mini_batch_size = 4": "mini_batch_size = 8\nmicro_batch_size = 8",
    "eps_low = 0.4": "eps_low = 0.2",
    "eps_high = 0.4": "eps_high = 0.2\ndual_clip = 1.05",
}
MINI_BATCH_ORDER = "mini-batch order: verl rollout order; trl a shuffle by TRL's seeded generator"


def by_step(records: dict) -> dict[int, dict[tuple[str, str], dict]]:
    """The first-RL-step comparisons by optimiser step, then by pair."""
    steps: dict[int, dict[tuple[str, str], dict]] = {}
    for pair in records["first_update"]:
        steps.setdefault(pair["optimiser_step"], {})[tuple(pair["frameworks"])] = pair
    return steps


def step_one(records: dict, framework: str) -> dict:
    (record,) = [r for r in records["runs"][framework]["records"] if r["step"] == 1]
    return record


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


def test_the_first_rl_step_is_the_same_in_verl_openrlhf_and_trl_with_the_clip_acting(aligned):
    folder, status, records, report = aligned
    assert status == 0, report
    assert all(run["complete"] and run["standins"] for run in records["runs"].values())
    steps = by_step(records)
    assert sorted(steps) == [1, 2]  # one mini-batch, two epochs
    expected_reward = first_rollout_reward(folder)
    for k, pairs in steps.items():
        assert sorted(pairs) == [("openrlhf", "trl"), ("verl", "openrlhf"), ("verl", "trl")]
        for pair in pairs.values():
            assert pair["tolerance"] == tolerance("float32", k)  # 1e-5, then 3e-5
            assert pair["rel"] <= pair["tolerance"] and pair["identical"] is True, pair
            assert pair["causes"] == []
            assert pair["step_one_rewards"] == pytest.approx([expected_reward] * 2, rel=1e-6)
    assert records["first_update_identical"] is True
    assert report.count(" | identical | ") == 6 and "### Optimiser step 2 of 2" in report
    assert_last_step_is_the_synced_one(folder / "run", ("verl", "openrlhf", "trl"), 2)
    # the clip acted, the same way in each trainer's own log
    verl = step_one(records, "verl")
    assert verl["clip_frac_low"] > 0 and verl["clip_frac_high"] > 0
    assert verl["log_ratio_min"] < -0.4 or verl["log_ratio_max"] > 0.4  # beyond the clip bound
    for framework in ("openrlhf", "trl"):
        other = step_one(records, framework)
        for name in ("clip_frac_low", "clip_frac_high", "log_ratio_min", "log_ratio_max"):
            assert other[name] == pytest.approx(verl[name], rel=1e-4, abs=1e-6), (framework, name)


def test_trls_advantage_epsilon_and_the_mini_batch_order_are_the_named_differences(tmp_path):
    """Group-std advantages (TRL adds 1e-4 to the std where verl adds 1e-6) and two mini-batches of
    2 in one epoch (verl takes them in rollout order, TRL shuffles the rollout batch first, so its
    second optimiser step sees other responses): the report names both. The aligned run (r - group
    mean; one mini-batch per epoch, the same two optimiser steps) shows both gone."""
    status, records, report = run(tmp_path, "verl,trl", **STD_AND_TWO_MINI_BATCHES)
    assert status == 0, report
    steps = by_step(records)
    for k in (1, 2):  # TRL's first mini-batch already holds other responses, under other advantages
        (pair,) = steps[k].values()
        # the same rollout (same rewards)
        assert pair["step_one_rewards"][0] == pytest.approx(pair["step_one_rewards"][1], rel=1e-6)
        assert pair["identical"] is False and pair["causes"] == [TRL_EPSILON, MINI_BATCH_ORDER]
    pair = steps[2][("verl", "trl")]
    assert f"| verl / trl | proportional | {pair['rel']:.2e} | 3e-05 | DIFFERENT |" in report
    assert TRL_EPSILON in report and MINI_BATCH_ORDER in report


def test_a_clip_bound_flipped_in_one_framework_is_named_by_its_clip_fractions(tmp_path, monkeypatch):
    """TRL's translation with its upper clip bound halved after translation, beside OpenRLHF (the
    aligned test shows the two agree unflipped): the runs complete, the first RL step is flagged
    different, and the report names the clip from the step-1 clip fractions the two trainers logged
    (no behaviour of the launches explains it)."""
    translate = TRANSLATORS["trl"]

    def with_a_lower_upper_bound(spec):
        launch = translate(spec)
        script = launch.files["train_trl.py"]
        assert "'epsilon_high': 0.4" in script
        flipped = script.replace("'epsilon_high': 0.4", "'epsilon_high': 0.2")
        return dataclasses.replace(launch, files={**launch.files, "train_trl.py": flipped})

    monkeypatch.setitem(TRANSLATORS, "trl", with_a_lower_upper_bound)
    status, records, report = run(tmp_path, "openrlhf,trl", **ALIGNED)
    assert status == 0, report
    steps = by_step(records)
    # the first optimiser step is on-policy (every ratio 1): no bound acts, the steps agree
    (first,) = steps[1].values()
    assert first["identical"] is True and first["rel"] <= tolerance("float32", 1), first
    # the second moves ratios past e^0.2 and not all past e^0.4: the bound changed the update
    (pair,) = steps[2].values()
    assert pair["identical"] is False and pair["rel"] > CHAINED
    assert records["first_update_identical"] is False
    (cause,) = pair["causes"]
    assert cause.startswith("clip (observed): the step-1 clip fractions differ (clip_frac_high ")
    assert step_one(records, "trl")["clip_frac_high"] > step_one(records, "openrlhf")["clip_frac_high"]
    assert "Overall: DIFFERENT (from optimiser step 2 on: 2)" in report and cause in report


def test_a_dual_clip_flipped_in_one_framework_is_named_by_its_clip_fractions(tmp_path, monkeypatch):
    """grpo's dual clip 1.05 through OpenRLHF (``--actor.dual_clip``) and TRL
    (``GMPO_PLUGINS_LOSS_HPARAMS``, it has no setting), with TRL's raised to 3.0 after translation:
    the dual clip acts in OpenRLHF's second optimiser step (``clip_frac_dual`` above 0) and not in
    TRL's; the first, on-policy step (every ratio 1) agrees, the second differs, and the report names
    the dual clip's fractions. Unflipped, the four trainers take the same step with this dual clip
    acting (test_grpo.py)."""
    translate = TRANSLATORS["trl"]

    def with_a_higher_dual_clip(spec):
        launch = translate(spec)
        assert launch.env["GMPO_PLUGINS_LOSS_HPARAMS"] == '{"dual_clip": 1.05}'
        return dataclasses.replace(launch, env={**launch.env, "GMPO_PLUGINS_LOSS_HPARAMS": '{"dual_clip": 3.0}'})

    monkeypatch.setitem(TRANSLATORS, "trl", with_a_higher_dual_clip)
    status, records, report = run(tmp_path, "openrlhf,trl", **DUAL_CLIP)
    assert status == 0, report
    steps = by_step(records)
    assert sorted(steps) == [1, 2]
    (first,) = steps[1].values()  # on-policy: no ratio away from 1, no clip acts
    assert first["identical"] is True and first["rel"] <= tolerance("float32", 1), first
    assert step_one(records, "openrlhf")["clip_frac_dual"] > 0
    assert step_one(records, "trl")["clip_frac_dual"] == 0
    pair = steps[2][("openrlhf", "trl")]
    assert pair["identical"] is False and pair["rel"] > CHAINED, pair
    (cause,) = pair["causes"]
    assert cause.startswith("clip (observed): the step-1 clip fractions differ (clip_frac_dual "), cause
    assert "Overall: DIFFERENT (from optimiser step 2 on: 2)" in report
