"""The trainer runs of the verl end-to-end tests: their settings, one batch driver process
for all of them, and what is read back (verl's console metric lines, the saved weights).

Every run trains the tiny task of ``examples/verl_cpu/assets.py`` with GRPO advantages,
4 prompts x 2 rollouts = 8 responses per step, ONE mini-batch per step
(``ppo_mini_batch_size`` = the whole batch, the same for every split) and ``ppo_epochs=2``:
the second pass sees importance ratios off 1 (clipping can act), and no split changes which
sequences share a mini-batch. Plain SGD without gradient clipping or weight decay, so a
parameter change is proportional to the accumulated gradient (Adam's update is invariant
to the gradient's scale and would hide a loss that grows with the number of micro-batches).

Splits: ``ppo_micro_batch_size_per_gpu`` 8 / 4 / 2 gives 1 / 2 / 4 micro-batches on one rank;
2 gloo ranks with 4 each give one micro-batch per rank.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(ROOT, "examples")

ACTOR = "actor_rollout_ref.actor"
BATCH_TIMEOUT_S = 1800

MICRO_BATCHES = {1: 8, 2: 4, 4: 2}  # micro-batches per mini-batch on one rank -> ppo_micro_batch_size_per_gpu


def common_overrides(assets, workdir: str, ray_dir: str) -> list[str]:
    """Settings shared by every run (see the module docstring)."""
    return [
        *assets.overrides(),
        f"+ray_kwargs.ray_init._temp_dir={ray_dir}",
        "ray_kwargs.ray_init.num_cpus=9",  # 2 ranks x 3, the task runner, TransferQueue (controller, 1 unit)
        "+ray_kwargs.ray_init.num_gpus=2",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        "data.train_batch_size=4",
        "data.max_prompt_length=32",
        "data.max_response_length=8",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        f"{ACTOR}.ppo_mini_batch_size=4",
        f"{ACTOR}.ppo_epochs=2",
        f"{ACTOR}.use_kl_loss=false",
        f"{ACTOR}.entropy_coeff=0",
        f"{ACTOR}.clip_ratio_low=0.4",
        f"{ACTOR}.clip_ratio_high=0.4",
        f"{ACTOR}.loss_agg_mode=seq-mean-token-mean",
        f"{ACTOR}.optim.optimizer=SGD",
        f"{ACTOR}.optim.lr=1.0",
        f"{ACTOR}.optim.weight_decay=0",
        f"{ACTOR}.optim.clip_grad=1000000.0",
        "trainer.balance_batch=false",  # keep verl's batch order: the same for every split
        "trainer.logger=[console,file]",
        "trainer.n_gpus_per_node=1",
        "trainer.total_epochs=1",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={os.path.join(workdir, 'checkpoints')}",
    ]


def split(micro_batches: int = 1, ranks: int = 1) -> list[str]:
    """Overrides for a split: ``micro_batches`` per rank with one rank, or ``ranks`` ranks."""
    if ranks == 1:
        return [f"{ACTOR}.ppo_micro_batch_size_per_gpu={MICRO_BATCHES[micro_batches]}"]
    per_rank = 8 // ranks  # responses per rank: one micro-batch each, for training and for log-probs
    return [
        f"trainer.n_gpus_per_node={ranks}",
        f"{ACTOR}.ppo_micro_batch_size_per_gpu={per_rank}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={per_rank}",
    ]


def loss(mode: str) -> list[str]:
    return [f"{ACTOR}.policy_loss.loss_mode={mode}"]


@dataclass
class Run:
    """One trainer run: its settings and, once run, what came back (``steps``: verl's logged
    metrics per step; ``weights_dir``: its metrics file and saved weights)."""

    name: str
    overrides: list[str]
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    status: str = "not run"
    seconds: float = float("nan")
    weights_dir: str = ""

    def weights(self, step: int) -> dict[str, torch.Tensor]:
        """The actor's parameters after ``step`` (0: the initial model), from rollout replica 0."""
        return torch.load(os.path.join(self.weights_dir, f"weights_0_{step}.pt"))


def read_metrics(path: str) -> dict[int, dict[str, float]]:
    """verl's file logger (``trainer.logger=[...,file]``): one JSON line per step,
    ``{"step": N, "data": {metric: value}}`` -> {N: {metric: float}}."""
    steps: dict[int, dict[str, float]] = {}
    if os.path.exists(path):
        with open(path) as handle:
            for line in handle:
                record = json.loads(line)
                steps[int(record["step"])] = {
                    key: float(value) for key, value in record["data"].items() if isinstance(value, (int, float))
                }
    return steps


def parse_batch_output(text: str, runs: dict[str, Run]) -> None:
    """``status`` and ``seconds`` of ``runs`` from the batch driver's end-of-run lines."""
    for match in re.finditer(r"=== end (\S+) (ok|failed) \(([0-9.]+) s\) ===", text):
        if match.group(1) in runs:
            runs[match.group(1)].status = match.group(2)
            runs[match.group(1)].seconds = float(match.group(3))


def run_batch(runs: list[Run], workdir: str, env: dict[str, str]) -> tuple[str, float]:
    """Run ``runs`` in one driver process (``batch.py``); returns its output and wall time."""
    spec = []
    for run in runs:
        run.weights_dir = os.path.join(workdir, "runs", run.name)
        spec.append({"name": run.name, "overrides": run.overrides, "output_dir": run.weights_dir})
    path = os.path.join(workdir, "runs.json")
    with open(path, "w") as handle:
        json.dump({"runs": spec}, handle)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "batch.py"), path],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BATCH_TIMEOUT_S,
    )
    with open(os.path.join(workdir, "batch.log"), "w") as handle:
        handle.write(proc.stdout)
    parse_batch_output(proc.stdout, {run.name: run for run in runs})
    for run in runs:
        run.steps = read_metrics(os.path.join(run.weights_dir, "metrics.jsonl"))
    return proc.stdout, time.monotonic() - start


Weights = dict[str, torch.Tensor]


def relative_difference(a: Weights, b: Weights, start: Weights) -> float:
    """max |a - b| / max |a - start| over all parameters: the difference between two runs'
    parameters after a step, relative to the size of the step's update."""
    diff = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
    update = max(float((a[k].double() - start[k].double()).abs().max()) for k in a)
    return diff / update if update > 0 else math.inf
