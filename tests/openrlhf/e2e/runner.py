"""Start ``gmpo-openrlhf`` (OpenRLHF's train_ppo_ray with registry losses) as a user would, in its own
process, on CPU, and read back what it left: the metrics OpenRLHF logged, the loss-call marker, the
actor's saved weights and the rollout engine's weights after its last sync.

The process gets ``PYTHONPATH = checkout:standins:shims`` (this checkout's gmpo_plugins before the installed
one, examples/openrlhf_cpu/standins/sitecustomize.py and the vLLM / flash-attn stand-ins of
examples/openrlhf_cpu/shims), which Ray passes on to its workers; a Ray temp dir
of its own under /tmp (never inside the virtualenv: Ray's socket paths must stay short); DeepSpeed's
JIT-built CPU ops in ``TORCH_EXTENSIONS_DIR`` (taken from the environment when set, so a cache is built
once; the virtualenv's ``ninja`` comes first on ``PATH``, as another ninja version discards the cache) and
the Hugging Face caches in the run's folder. A run that outlives its timeout is killed with
its whole process group and reported with the tail of its output.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).parent
CHECKOUT = HERE.parents[2]
CPU_STANDINS = CHECKOUT / "examples" / "openrlhf_cpu"
STANDINS = CPU_STANDINS / "standins"
SHIMS = CPU_STANDINS / "shims"
SCRIPT = Path(sys.executable).parent / "gmpo-openrlhf"

# 2 prompts x 2 samples = 4 samples a step, all in one optimizer step (train.batch_size 4); no KL term
# here (the paper's beta 0, and no reference model to start): add KL_LOSS_ARGS or NO_KL_ARGS
KL_LOSS_ARGS = ("--algo.kl.use_loss", "--algo.kl.estimator", "k3")
NO_KL_ARGS = ("--algo.kl.init_coef", "0")
STEP_ARGS = tuple(
    """
    --data.input_key input
    --data.label_key label
    --vllm.num_engines 1
    --actor.num_gpus_per_node 1
    --ref.num_gpus_per_node 1
    --algo.advantage.estimator group_norm
    --rollout.n_samples_per_prompt 2
    --rollout.batch_size 2
    --train.batch_size 4
    --rollout.micro_batch_size 2
    --data.max_len 32
    --rollout.max_new_tokens 8
    --actor.eps_clip_low_high 0.4 0.4
    --ds.attn_implementation sdpa
    --ds.zero_stage 2
    --actor.lr_warmup_ratio 0
    """.split()
)


@dataclass
class Run:
    argv: list
    returncode: int
    output: str
    seconds: float
    out: Path
    ray_started: bool

    def check(self) -> Run:
        assert self.returncode == 0, f"gmpo-openrlhf exited {self.returncode}:\n{self.output[-6000:]}"
        return self

    def loss_calls(self) -> list[dict]:
        path = self.out / "record" / "loss_calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def completions(self) -> list[dict]:
        """What the rollout engine generated, ``{"prompt", "sample", "seed", "completion"}`` per request, in
        (prompt, sample) order (requests for different prompts interleave in the async engine)."""
        path = self.out / "record" / "completions.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return sorted(rows, key=lambda row: (row["prompt"], row["sample"]))

    def scalars(self) -> dict[str, list[tuple[int, float]]]:
        """Every scalar OpenRLHF's TensorboardLogger wrote: ``{"train/policy_loss": [(step, value), ...]}``."""
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        found: dict[str, list[tuple[int, float]]] = {}
        for events in sorted((self.out / "tensorboard").rglob("events.out.tfevents.*")):
            accumulator = EventAccumulator(str(events.parent))
            accumulator.Reload()
            for tag in accumulator.Tags()["scalars"]:
                found[tag] = [(event.step, event.value) for event in accumulator.Scalars(tag)]
        return found

    def actor_weights(self) -> dict[str, torch.Tensor]:
        """The actor's weights as ``PolicyModelActor.save_model`` wrote them at the end of training."""
        from safetensors.torch import load_file

        weights: dict[str, torch.Tensor] = {}
        for path in sorted((self.out / "final").glob("*.safetensors")):
            weights.update(load_file(path))
        return weights

    def engine(self) -> dict:
        """``{"syncs": n, "state_dict": ...}``: the rollout engine after its last weight sync."""
        return torch.load(self.out / "record" / "engine_weights.pt")


def initial_weights(model: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    for path in sorted(model.glob("*.safetensors")):
        weights.update(load_file(path))
    return weights


def run_gmpo_openrlhf(
    fixtures: dict,
    out: Path,
    args: list,
    *,
    steps: int = 1,
    ray_gpus: int = 4,
    timeout: float = 600,
    extra_env: dict | None = None,
) -> Run:
    """``gmpo-openrlhf <fixture args> STEP_ARGS <args>`` for ``steps`` global steps (2 prompts each),
    outputs under ``out``; later ``args`` override earlier ones (argparse keeps the last). Ray gets
    ``ray_gpus`` logical GPUs; ``extra_env`` is added to the process environment."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "record").mkdir(exist_ok=True)
    argv = [
        str(SCRIPT),
        "--actor.model_name_or_path",
        str(fixtures["model"]),
        "--data.prompt_dataset",
        str(fixtures["prompts"]),
        "--reward.remote_url",
        str(fixtures["reward"]),
        "--data.max_samples",
        str(2 * steps),
        *STEP_ARGS,
        "--ckpt.output_dir",
        str(out / "final"),
        "--ckpt.path",
        str(out / "ckpt"),
        "--logger.tensorboard_dir",
        str(out / "tensorboard"),
        "--logger.wandb.run_name",
        "run",
        *args,
    ]
    ray_temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(CHECKOUT), str(STANDINS), str(SHIMS)]),
        # the virtualenv's ninja first: DeepSpeed's JIT build cache is only reused by the same ninja version
        "PATH": os.pathsep.join([str(SCRIPT.parent), os.environ.get("PATH", "")]),
        "TORCHDYNAMO_DISABLE": "1",
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(out / "torch_extensions")),
        "HF_HOME": str(out / "hf"),
        "HF_DATASETS_CACHE": str(out / "hf" / "datasets"),
        "OPENRLHF_E2E_RAY": json.dumps({"num_cpus": max(4, 2 * ray_gpus), "num_gpus": ray_gpus, "temp_dir": ray_temp}),
        "OPENRLHF_E2E_RECORD_DIR": str(out / "record"),
        "WANDB_MODE": "disabled",
        **(extra_env or {}),
    }
    start = time.monotonic()
    process = subprocess.Popen(
        argv, env=env, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        returncode = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        returncode = -signal.SIGKILL
        output += f"\n[killed after {timeout:.0f} s]"
    seconds = time.monotonic() - start
    ray_started = any(Path(ray_temp).iterdir())
    shutil.rmtree(ray_temp, ignore_errors=True)
    (out / "output.log").write_text(output)
    return Run(argv, returncode, output, seconds, out, ray_started)
