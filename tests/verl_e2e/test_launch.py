"""Bad settings make ``python -m verl_cpu`` exit non-zero within seconds, with a message
naming the setting, before Ray starts; never a hang (each run has a hard timeout)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from .harness import EXAMPLES

TIMEOUT_S = 180  # a hang fails here; an import of verl takes ~10 s on an idle 2-core machine
ASSETS = [
    "data.train_files=/nonexistent/train.parquet",
    "data.val_files=/nonexistent/val.parquet",
    "actor_rollout_ref.model.path=/nonexistent/model",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",  # verl's actor config requires it
    "trainer.n_gpus_per_node=1",
]


def launch(*overrides: str) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([EXAMPLES, os.environ.get("PYTHONPATH", "")]))
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "verl_cpu", *ASSETS, *overrides],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"python -m verl_cpu {' '.join(overrides)} did not exit within {TIMEOUT_S} s: {error.output}")
    return proc.returncode, proc.stdout, time.monotonic() - start


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["actor_rollout_ref.actor.policy_loss.loss_mode=gmpo_typo"],
            ["actor_rollout_ref.actor.policy_loss.loss_mode=gmpo_typo", "Unsupported loss mode", "'gmpo'"],
        ),
        (
            ["actor_rollout_ref.actor.policy_loss.loss_mode=gmpo", "actor_rollout_ref.actor.clip_ratio_low=0"],
            ["actor_rollout_ref.actor.clip_ratio_low=0", "loss_mode=gmpo"],
        ),
        (
            ["actor_rollout_ref.actor.policy_loss.loss_mode=gmpo", "ray_kwargs.ray_init.num_cpus=2"],
            ["ray_kwargs.ray_init.num_cpus=2", "wait forever", "at least 6"],  # 3 + task runner + TransferQueue 2
        ),
        (
            [
                "actor_rollout_ref.actor.policy_loss.loss_mode=gmpo",
                "algorithm.rollout_correction.bypass_mode=true",
                "algorithm.rollout_correction.rollout_is=token",
            ],
            ["algorithm.rollout_correction.rollout_is=token", "bypass_mode=true", "loss_mode=gmpo"],
        ),
    ],
    ids=["unknown-loss", "clip-ratio-low-zero", "too-few-ray-cpus", "bypass-is-weights-under-a-registry-loss"],
)
def test_bad_setting_exits_non_zero_with_a_message_naming_it(overrides, expected):
    code, output, seconds = launch(*overrides)
    assert code == 2, output[-3000:]
    last = output.strip().splitlines()[-1]
    for text in expected:
        assert text in output, f"{text!r} not in the output; last line: {last}"
    assert "Started a local Ray instance" not in output  # refused before Ray starts
    print(f"{overrides[-1]}: exit {code} after {seconds:.1f} s: {last}")


def test_a_plain_main_ppo_launch_with_an_unknown_loss_fails_in_the_driver_before_ray_starts(tmp_path):
    """verl's own ``python -m verl.trainer.main_ppo`` (no stand-ins, no extra setting): the
    entry point's check in verl's ``validate_config`` stops the typo in the driver."""
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_ppo",
            *ASSETS,
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.policy_loss.loss_mode=gmpo_typo",
        ],
        cwd=tmp_path,  # Hydra writes its outputs/ folder there
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
    )
    output = proc.stdout
    assert proc.returncode != 0, output[-3000:]
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=gmpo_typo: Unsupported loss mode" in output
    assert "'gmpo'" in output  # the available names, ours among them
    assert "Started a local Ray instance" not in output and "ray init kwargs" not in output
    print(f"main_ppo, loss_mode=gmpo_typo: exit {proc.returncode} after {time.monotonic() - start:.1f} s")
