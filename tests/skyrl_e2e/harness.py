"""Runs of SkyRL's trainer on CPU for the tests: the base overrides, the batch of runs, and
reading their results (metrics and parameters after each step).

Every run goes through ``examples/skyrl_cpu`` (``python -m tests.skyrl_e2e.driver``, which
registers the test-only split-dependent loss and calls the example's launcher) in a subprocess
with a time limit, so a hang fails the test instead of blocking the session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
ALGORITHM = "trainer.algorithm"
# 2 prompts x 4 samples = one mini-batch of 8 sequences of 8 response tokens
MINI_BATCH = 8


def base_overrides(model: str, train: str, out: str) -> list[str]:
    """SkyRL overrides shared by every run: the tiny task, fp32 FSDP2 on gloo, GRPO, gmpo with
    sequence_mean, SGD-sized learning rate, no clipping of the gradient norm, no eval or saving."""
    return [
        f"trainer.policy.model.path={model}",
        f"data.train_data=['{train}']",
        "data.dataloader.num_workers=0",
        "trainer.strategy=fsdp",
        "trainer.placement.colocate_all=false",
        "trainer.placement.policy_num_gpus_per_node=1",
        "trainer.bf16=false",
        "trainer.policy.fsdp_config.mixed_precision.param_dtype=fp32",
        "trainer.flash_attn=false",
        "trainer.remove_microbatch_padding=false",
        f"{ALGORITHM}.advantage_estimator=grpo",
        f"{ALGORITHM}.use_kl_loss=false",
        f"{ALGORITHM}.use_kl_in_reward=false",
        f"{ALGORITHM}.policy_loss_type=gmpo",
        f"{ALGORITHM}.loss_reduction=sequence_mean",
        f"{ALGORITHM}.eps_clip_low=0.4",
        f"{ALGORITHM}.eps_clip_high=0.4",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        f"trainer.micro_train_batch_size_per_gpu={MINI_BATCH}",
        f"trainer.micro_forward_batch_size_per_gpu={MINI_BATCH}",
        "generator.n_samples_per_prompt=4",
        "generator.sampling_params.max_generate_length=8",
        "generator.inference_engine.model_dtype=float32",
        "generator.inference_engine.weight_sync_backend=gloo",
        "generator.inference_engine.enable_ray_prometheus_stats=false",
        "trainer.enable_ray_gpu_monitor=false",
        "trainer.max_prompt_length=32",
        "trainer.epochs=1",
        "trainer.max_training_steps=1",
        "trainer.eval_interval=-1",
        "trainer.eval_before_train=false",
        "trainer.ckpt_interval=-1",
        "trainer.hf_save_interval=-1",
        "trainer.logger=console",
        "trainer.print_example_interval=0",
        f"trainer.ckpt_path={out}/ckpt",
        f"trainer.export_path={out}/export",
        f"trainer.log_path={out}/logs",
        "trainer.policy.optimizer_config.lr=0.01",
        "trainer.policy.optimizer_config.max_grad_norm=1000000",
        "trainer.policy.optimizer_config.weight_decay=0",
    ]


def split(micro_batches: int = 1, ranks: int = 1) -> list[str]:
    """Overrides that split the mini-batch over ``ranks`` gloo ranks and ``micro_batches``
    micro-batches per rank."""
    per_rank = MINI_BATCH // ranks
    return [
        f"trainer.placement.policy_num_gpus_per_node={ranks}",
        f"trainer.micro_train_batch_size_per_gpu={per_rank // micro_batches}",
    ]


def loss(name: str) -> list[str]:
    """The override selecting policy loss ``name``."""
    return [f"{ALGORITHM}.policy_loss_type={name}"]


def environment() -> dict[str, str]:
    """The subprocess environment: the example and the repository on PYTHONPATH (ahead of what
    the nox session sets), SGD in the policy workers, one thread per process."""
    env = dict(os.environ)
    paths = [EXAMPLES, ROOT, *env.get("PYTHONPATH", "").split(os.pathsep)]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(SKYRL_CPU_OPTIMIZER="sgd", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("SKYRL_DUMP_INFRA_LOG_TO_STDOUT", None)
    return env


def launch(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``python -m tests.skyrl_e2e.driver args`` from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "tests.skyrl_e2e.driver", *args],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class Run:
    """What a finished run left in its folder."""

    folder: str
    steps: dict[int, dict[str, object]]
    weight_versions: int
    wall_s: float

    def params(self, step: int) -> dict[str, torch.Tensor]:
        """The policy's parameters after ``step`` (as the inference engine received them)."""
        return torch.load(os.path.join(self.folder, f"params_step{step}.pt"))


def read_run(folder: str) -> Run:
    """Load ``folder/metrics.json``."""
    with open(os.path.join(folder, "metrics.json")) as handle:
        data = json.load(handle)
    steps = {int(step): metrics for step, metrics in data["steps"].items()}
    return Run(folder, steps, data["weight_versions"], data["wall_s"])


def run_batch(runs: dict[str, list[str]], base: list[str], out: str, timeout: float) -> dict[str, Run]:
    """Every run of ``runs`` (name -> extra overrides) in one Ray session; their results."""
    batch = os.path.join(out, "runs.json")
    with open(batch, "w") as handle:
        json.dump(runs, handle)
    done = launch(["--batch", batch, "--out", out, "--save-params", *base], timeout)
    if done.returncode != 0:
        raise RuntimeError(f"SkyRL CPU runs failed (exit {done.returncode}):\n{done.stderr[-6000:]}")
    return {name: read_run(os.path.join(out, name)) for name in runs}


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """max over parameters of max|a - b|."""
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
