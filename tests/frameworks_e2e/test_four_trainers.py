"""gmpo through the four trainers in one report: the example aligned for SkyRL
(``examples/frameworks/tiny_adam.toml``: AdamW eps 1e-8, the one setting verl, OpenRLHF, TRL and
SkyRL share, one RL step of two optimiser steps on the step's two prompts) through verl's v1
trainer (PPOTrainerSync), OpenRLHF's train_ppo_ray, TRL's GRPOTrainer and SkyRL's RayPPOTrainer, each in its
own virtualenv on the CPU stand-ins (``examples/{verl,openrlhf,trl,skyrl}_cpu``; all draw the first
rollout from ``examples/seeded_generation.py`` and score it with the example's reward), then the
sign-like comparison of ``gmpo_plugins.frameworks.first_update`` on the parameters each left after
each of the first RL step's two optimiser steps, for every pair.

SkyRL 0.3 imports on Python >= 3.12 only; on 3.11 its processes need ``tests/skyrl/shims`` (a
``typing.TypedDict`` stand-in) first on PYTHONPATH, set here for the runs this test starts.

Run by ``nox -s frameworks_e2e_four`` with ``GMPO_PLUGINS_PYTHON_{VERL,OPENRLHF,TRL,SKYRL}`` naming the
virtualenvs.
"""

from __future__ import annotations

import json

import pytest

from gmpo_plugins.cli import main
from tests.example_runs import (
    adam_example_in,
    assert_every_pair_identical_sign_like,
    assert_last_step_is_the_synced_one,
    first_rollout_reward,
    step_one_records,
)

FRAMEWORKS = ("verl", "openrlhf", "trl", "skyrl")
LOSS_METRICS = ("clip_frac_low", "clip_frac_high", "log_ratio_min", "log_ratio_max")


def test_gmpo_takes_the_same_first_rl_step_in_the_four_trainers_under_adamw_eps_1e_8_with_the_clip_acting(
    tmp_path, monkeypatch
):
    spec = adam_example_in(tmp_path, monkeypatch)
    out = tmp_path / "run"
    status = main(["frameworks", str(spec), "--frameworks", ",".join(FRAMEWORKS), "--out", str(out)])
    report = (out / "report.md").read_text()
    assert status == 0, report
    records = json.loads((out / "records.json").read_text())
    assert sorted(records["runs"]) == sorted(FRAMEWORKS)
    assert all(run["complete"] and run["standins"] for run in records["runs"].values())
    # the same first rollout: the step's two prompts, the seeded samples, the example's reward
    assert_every_pair_identical_sign_like(records, FRAMEWORKS, first_rollout_reward(tmp_path))
    pairs = records["first_update"]
    skyrl_trl = next(p for p in pairs if p["optimiser_step"] == 2 and p["frameworks"] == ["trl", "skyrl"])
    assert f"| trl / skyrl | sign-like | {skyrl_trl['rel']:.2e} | 3e-05 | identical |" in report
    assert_last_step_is_the_synced_one(out, FRAMEWORKS, 2)
    # the clip acted in the second optimiser step, the same way in the four trainers' own logs
    step_one = step_one_records(records, FRAMEWORKS)
    skyrl = step_one["skyrl"]
    assert skyrl["clip_frac_low"] > 0 and skyrl["clip_frac_high"] > 0
    assert skyrl["log_ratio_min"] < -0.4 or skyrl["log_ratio_max"] > 0.4  # beyond the clip bound
    for name in FRAMEWORKS[:3]:
        for metric in LOSS_METRICS:
            assert step_one[name][metric] == pytest.approx(skyrl[metric], rel=1e-4, abs=1e-6), (name, metric)
