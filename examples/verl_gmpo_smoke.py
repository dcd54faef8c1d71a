"""Smoke run: verl's own PPO trainer on a CPU for a few steps with ``loss_mode=gmpo``.

    python examples/verl_gmpo_smoke.py [--steps N] [extra verl overrides ...]

Needs verl 0.9.1, gmpo-plugins, cachetools and transferqueue in the environment (``nox -s verl
--install-only`` makes one and keeps it: ``.nox/verl/bin/python examples/verl_gmpo_smoke.py``). Builds a
tiny random Qwen2, its tokenizer and a toy dataset in a new temporary folder, then runs
``python -m verl_cpu`` (examples/verl_cpu: verl's default v1 trainer, ``PPOTrainerSync.fit()``
with TransferQueue, with CPU stand-ins for the GPU platform, the vLLM server and NCCL) and
prints verl's own console metric lines, one per step (``actor/pg_loss``, ``actor/gmpo/...``,
``critic/score/mean``, ...). The full log stays in the temporary folder, whose path is
printed. Exit status: the trainer's.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

EXAMPLES = os.path.dirname(os.path.abspath(__file__))
PREFIX = re.compile(r"^(\x1b\[[0-9;]*m)?\(\w+ pid=\d+\)(\x1b\[[0-9;]*m)? ")


def overrides(assets, workdir: str, steps: int) -> list[str]:
    """A small GRPO run with the GMPO loss (paper's eps 0.4 in log space)."""
    return [
        *assets.overrides(),
        f"+ray_kwargs.ray_init._temp_dir={tempfile.mkdtemp(prefix='ray_', dir='/tmp')}",
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=4",
        "data.max_prompt_length=32",
        "data.max_response_length=8",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.policy_loss.loss_mode=gmpo",
        "actor_rollout_ref.actor.clip_ratio_low=0.4",
        "actor_rollout_ref.actor.clip_ratio_high=0.4",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "actor_rollout_ref.actor.optim.lr=0.01",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "trainer.n_gpus_per_node=1",
        f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=10",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={os.path.join(workdir, 'checkpoints')}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    parser.add_argument("extra", nargs="*", help="further verl Hydra overrides")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")

    sys.path.insert(0, EXAMPLES)
    from verl_cpu import assets as task

    workdir = tempfile.mkdtemp(prefix="verl_gmpo_smoke_")
    log_path = os.path.join(workdir, "verl.log")
    print(f"verl smoke: building the tiny task in {workdir}", flush=True)
    assets = task.build(os.path.join(workdir, "assets"))
    command = [sys.executable, "-m", "verl_cpu", *overrides(assets, workdir, args.steps), *args.extra]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([EXAMPLES, os.environ.get("PYTHONPATH", "")]))
    print(f"verl smoke: python -m verl_cpu ... loss_mode=gmpo, {args.steps} steps (log: {log_path})", flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            command, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            text = PREFIX.sub("", line)
            if text.startswith("step:") or text.startswith("verl_cpu:"):
                print(text, end="", flush=True)
        code = proc.wait()
    if code != 0:
        with open(log_path) as log:
            print("".join(log.readlines()[-40:]), end="")
        print(f"verl smoke: the trainer exited with status {code} (full log: {log_path})")
    return code


if __name__ == "__main__":
    sys.exit(main())
