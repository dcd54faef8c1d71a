"""A second loss through all four trainers, its dual clip acting: grpo with a dual clip of 1.05 on
the example aligned for SkyRL (``examples/frameworks/tiny_adam.toml``: AdamW eps 1e-8, one RL
step of two optimiser steps, compared after each), on 8 responses (4 prompts, every row of its
dataset, one mini-batch, one forward/backward pass), through verl's v1 trainer (PPOTrainerSync), OpenRLHF's
train_ppo_ray, TRL's GRPOTrainer and SkyRL's RayPPOTrainer, each in its own virtualenv on the CPU
stand-ins.

The dual clip caps tokens of negative advantage whose ratio exceeds it: in the second optimiser
step a few have moved past 1.05 (none with the example's 4 responses). verl carries it in
``clip_ratio_c`` and OpenRLHF in ``--actor.dual_clip``; TRL and SkyRL have no setting for it, so
their launches export it in ``GMPO_PLUGINS_LOSS_HPARAMS``, which the loss then reads in the process
that computes it (TRL's trainer, SkyRL's Ray policy worker: the adapters' provenance lines in the
logs). Every pair of the four is compared with the sign-like comparison of
``gmpo_plugins.frameworks.first_update``; grpo's token clip (ratio space, [0.8, 1.2]) and the dual
clip act in the second optimiser step, the same way in the four logs.

Run by ``nox -s frameworks_e2e_four`` with ``GMPO_PLUGINS_PYTHON_{VERL,OPENRLHF,TRL,SKYRL}`` naming the
virtualenvs (SkyRL's processes need ``tests/skyrl/shims`` on PYTHONPATH, set here).
"""

from __future__ import annotations

import json

import pytest

from gmpo_plugins.cli import main
from tests.example_runs import (
    adam_example_in,
    assert_every_pair_identical_sign_like,
    first_rollout_reward,
    step_one_records,
)

FRAMEWORKS = ("verl", "openrlhf", "trl", "skyrl")
LOSS_METRICS = ("clip_frac_low", "clip_frac_high", "clip_frac_dual", "log_ratio_min", "log_ratio_max")
PROMPTS = 4
GRPO = (
    'loss="grpo"',
    "loss_hparams.eps_low=0.2",
    "loss_hparams.eps_high=0.2",
    "loss_hparams.dual_clip=1.05",
    f"prompts_per_step={PROMPTS}",
    "mini_batch_size=8",
    "micro_batch_size=8",
    'dataset="four_prompts.jsonl"',
)
OVERRIDE = "dual_clip=1.05 (override GMPO_PLUGINS_LOSS_HPARAMS)"  # the adapters' provenance line


def test_grpo_with_its_dual_clip_acting_takes_the_same_first_rl_step_in_the_four_trainers(tmp_path, monkeypatch):
    spec = adam_example_in(tmp_path, monkeypatch)
    rows = (tmp_path / "prompts.jsonl").read_text().splitlines()[:PROMPTS]
    (tmp_path / "four_prompts.jsonl").write_text("".join(row + "\n" for row in rows))  # every row in the first batch
    out = tmp_path / "run"
    sets = [arg for value in GRPO for arg in ("--set", value)]
    argv = ["frameworks", str(spec), *sets, "--frameworks", ",".join(FRAMEWORKS)]
    status = main([*argv, "--out", str(out)])
    report = (out / "report.md").read_text()
    assert status == 0, report
    records = json.loads((out / "records.json").read_text())
    assert all(run["complete"] and run["standins"] for run in records["runs"].values())

    # the dual clip: each framework's own setting, or the variable, read where the loss runs
    assert "actor_rollout_ref.actor.clip_ratio_c=1.05" in (out / "verl" / "launch.sh").read_text()
    assert "--actor.dual_clip 1.05" in (out / "openrlhf" / "launch.sh").read_text()
    for name in ("trl", "skyrl"):
        assert """export GMPO_PLUGINS_LOSS_HPARAMS='{"dual_clip": 1.05}'""" in (out / name / "launch.sh").read_text()
    assert OVERRIDE in (out / "trl" / "output.log").read_text()
    # SkyRL: its driver's check of the settings, and the Ray policy worker that computes the loss
    assert (out / "skyrl" / "output.log").read_text().count(OVERRIDE) == 2

    # every pair after each of the two optimiser steps
    assert_every_pair_identical_sign_like(records, FRAMEWORKS, first_rollout_reward(tmp_path, PROMPTS))
    # grpo's clip and its dual clip acted in the second optimiser step, the same way in the four logs
    step_one = step_one_records(records, FRAMEWORKS)
    verl = step_one["verl"]
    assert verl["clip_frac_low"] > 0 and verl["clip_frac_high"] > 0 and verl["clip_frac_dual"] > 0
    assert verl["log_ratio_max"] > 0.1823  # beyond ln 1.2
    for name in FRAMEWORKS[1:]:
        for metric in LOSS_METRICS:
            assert step_one[name][metric] == pytest.approx(verl[metric], rel=1e-4, abs=1e-6), (name, metric)
