"""How a framework's launch runs on this machine: as translated where the framework's
interpreter sees a GPU, with the CPU stand-ins of a gmpo-plugins checkout where it sees none.

    framework  no GPU                                        always
    verl       ``python3 -m verl_cpu`` in place of            ``trainer.n_gpus_per_node=1`` (one
               ``python3 -m verl.trainer.main_ppo``,          rank: the spec names no device
               ``examples/`` on PYTHONPATH: verl's own        count); Ray's files in a fresh
               trainer with the stand-ins of                  folder (``ray_dir``), so that every
               ``examples/verl_cpu`` (CPU platform, gloo      process the run leaves can be
               process group, HF-generate rollout server)     found and ended
    openrlhf   ``examples/openrlhf_cpu`` standins and shims   ``python3 -m gmpo_plugins.adapters.
               on PYTHONPATH (CPU torch.cuda calls, Ray's     openrlhf.cli`` for ``gmpo-openrlhf``
               logical GPUs from ``OPENRLHF_E2E_RAY``, an     (the framework's interpreter, not
               HF-generate vLLM engine, ``--ds.param_dtype    whichever script PATH finds);
               fp32``); ``--ds.attn_implementation sdpa``     ``--vllm.num_engines 1
               (transformers refuses flash_attention_2        --actor.num_gpus_per_node 1
               without CUDA); the engine records its          --ref.num_gpus_per_node 1`` (one
               completions and weights in ``record/``         engine, one rank each: OpenRLHF
               (``OPENRLHF_E2E_RECORD_DIR``);                 generates with vLLM engines only,
               ``TORCHDYNAMO_DISABLE=1`` (keeps OpenRLHF's    and asks for 8 GPUs per model by
               ``torch.compile``'d entropy, used with         default); Ray's files in a fresh
               ``--actor.entropy_coef``, off the CPU          folder (``RAY_TMPDIR``,
               compiler); DeepSpeed's JIT-built CPU ops       ``ray_dir``)
               cached in ``TORCH_EXTENSIONS_DIR``: the
               environment's when set, else the
               interpreter's virtualenv's
               ``torch_extensions`` where it can be
               written (where ``nox -s openrlhf_e2e``
               builds them; a first build takes minutes),
               with its ``bin`` first on PATH (the cache
               is reused by the same ninja only)
    trl        ``python3 -m trl_cpu SCRIPT``: TRL's own
               GRPOTrainer (it runs on CPU as it is) with
               the seeded ``rollout_func`` of
               ``examples/trl_cpu``
    skyrl      ``python3 -m skyrl_cpu --out DIR               Ray's files in a fresh folder
               --save-params --reward DIR/skyrl_main.py:      (``RAY_TMPDIR``, ``ray_dir``)
               _reward OVERRIDES CPU`` in place of
               ``python3 DIR/skyrl_main.py OVERRIDES``:
               SkyRL's own RayPPOTrainer with the stand-ins
               of ``examples/skyrl_cpu`` (logical Ray GPUs,
               CPU FSDP workers, an HF-generate engine, a
               seeded one-turn generator scored by the
               reward the launch's script binds) and their
               ``shims`` on PYTHONPATH; ``CPU`` the
               overrides of ``SKYRL_CPU_OVERRIDES`` (one
               rank, no flash-attn, gloo weight sync, a
               float32 engine, no GPU monitors)

Every CPU rollout stand-in samples with ``examples/seeded_generation.py`` (seed from the prompt's
token ids and the sample's index for that prompt), so frameworks that hold the same weights draw
the same responses, and each leaves the parameters after the first RL step in its
folder (``LocalLaunch.first_update``): verl's rollout server saves every weight version it
receives (``VERL_CPU_SAVE_WEIGHTS``), OpenRLHF's vLLM engine the weights of its first sync
(``record/engine_weights_1.pt``), TRL's callback the model after the last optimiser step of RL step 1
(``TRL_CPU_FIRST_UPDATE``), SkyRL's engine the weights SkyRL synced after each RL step
(``params_step1.pt``, beside its logged metrics in ``metrics.json``: ``SKYRL_METRICS``).

A sync happens once per RL step, after its last optimiser step. The parameters after each
optimiser step k = 1..K of RL step 1 (``LocalLaunch.step_params``, K the spec's optimiser steps per
RL step) come from a hook on the actor's optimiser step in every stand-in, set by
``STEP_PARAMS_ENV`` (the folder ``STEP_PARAMS`` under the run's) and ``STEP_COUNT_ENV`` (K), each
saving ``step_<k>.pt`` (``examples/optimiser_steps.py``): verl's training worker and SkyRL's policy
worker by torch's ``Optimizer.register_step_post_hook`` with the parameters taken as their weight
syncs take them, TRL's callback at ``on_step_end``, OpenRLHF at the return of DeepSpeed's
``DeepSpeedEngine.step`` (under ZeRO-2 the inner optimiser steps a flat copy, which DeepSpeed copies
into the module afterwards: ``examples/openrlhf_cpu/standins/sitecustomize.py``).

The GPU count is asked of the framework's own interpreter (``torch.cuda.device_count()``).
The stand-ins are no part of the installed package: without a checkout's ``examples/`` a
run on a machine without a GPU is refused (``StandinsError``) before anything starts, and so
is an OpenRLHF launch in fp32 on a machine with a GPU (stock OpenRLHF trains in bf16 or fp16
only; fp32 is the stand-ins' addition).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from gmpo_plugins.frameworks.launch import Launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # in a checkout of gmpo-plugins
VERL_STANDINS = "examples/verl_cpu (CPU platform, gloo process group, HF-generate rollout server)"
TRL_STANDINS = "examples/trl_cpu (seeded rollout_func: the rollouts of the other frameworks' stand-ins)"
VERL_MODULE = ("python3", "-m", "verl.trainer.main_ppo")
OPENRLHF_SCRIPT = "gmpo-openrlhf"
OPENRLHF_MODULE = ("python3", "-m", "gmpo_plugins.adapters.openrlhf.cli")
OPENRLHF_STANDINS = (
    "examples/openrlhf_cpu (CPU torch.cuda calls, logical Ray GPUs, HF-generate vLLM engine, fp32, sdpa attention)"
)
OPENRLHF_COUNTS = ("--vllm.num_engines", "1", "--actor.num_gpus_per_node", "1", "--ref.num_gpus_per_node", "1")
OPENRLHF_CPU_ARGS = ("--ds.attn_implementation", "sdpa")
OPENRLHF_RAY = {"num_cpus": 6, "num_gpus": 3}  # logical: the actor, a reference model, one vLLM engine
OPENRLHF_RECORD = "record"  # under the run's folder: the stand-in engine's completions and weights
OPENRLHF_RECORD_ENV = "OPENRLHF_E2E_RECORD_DIR"
OPENRLHF_FIRST_SYNC = "engine_weights_1.pt"  # the weights of the engine's first sync: after RL step 1
SKYRL_SCRIPT = "skyrl_main.py"  # the launch's script (translate.skyrl), which binds the reward to _reward
SKYRL_STANDINS = (
    "examples/skyrl_cpu (logical Ray GPUs, CPU FSDP workers, HF-generate engine, seeded one-turn generator)"
)
SKYRL_CPU_OVERRIDES = (  # what SkyRL's defaults ask of a GPU machine: flash-attn, NCCL, vLLM's dtype, GPU monitors
    "trainer.strategy=fsdp",
    "trainer.placement.colocate_all=false",
    "trainer.placement.policy_num_gpus_per_node=1",
    "trainer.flash_attn=false",
    "trainer.remove_microbatch_padding=false",
    "data.dataloader.num_workers=0",
    "generator.inference_engine.model_dtype=float32",
    "generator.inference_engine.weight_sync_backend=gloo",
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.enable_ray_gpu_monitor=false",
)
SKYRL_METRICS = "metrics.json"  # skyrl_cpu's record of every payload SkyRL logged, by RL step
SKYRL_FIRST_UPDATE = "params_step1.pt"
STEP_PARAMS = "optimiser_steps"  # under the run's folder: step_<k>.pt after optimiser step k of RL step 1
STEP_PARAMS_ENV = "GMPO_CPU_STEP_PARAMS"  # examples/optimiser_steps.py: the folder
STEP_COUNT_ENV = "GMPO_CPU_STEP_COUNT"  # examples/optimiser_steps.py: K, the optimiser steps of RL step 1
FP32 = ("--ds.param_dtype", "fp32")
PROBE = "import torch; print(torch.cuda.device_count())"
PROBE_TIMEOUT_S = 300.0
RAY_DIR_PREFIX = "gmpo-ray-"  # under /tmp: Ray's socket paths must stay short


class StandinsError(RuntimeError):
    """A launch that cannot run here: no GPU and no stand-ins, or an interpreter that fails."""


@dataclass(frozen=True)
class LocalLaunch:
    """A launch as it runs here: ``standins`` names what stood in for the GPU ("" for none),
    ``pythonpath`` the folders its processes import them from; ``ray_dir`` is the folder of
    the Ray instance the run starts (None without Ray); ``first_update`` the file in which
    the stand-ins leave the parameters after the first RL step ("" for none), ``step_params``
    the files of the parameters after each of its optimiser steps (module docstring; empty for
    none)."""

    launch: Launch
    standins: str = ""
    pythonpath: tuple[str, ...] = ()
    ray_dir: str | None = None
    first_update: str = ""
    step_params: tuple[str, ...] = ()


def with_step_params(local: LocalLaunch, folder: Path, optimiser_steps: int) -> LocalLaunch:
    """``local`` (on stand-ins) with the environment that makes them save the parameters after each
    of RL step 1's ``optimiser_steps`` optimiser steps, and the files they will be in."""
    directory = folder / STEP_PARAMS
    env = {**local.launch.env, STEP_PARAMS_ENV: str(directory), STEP_COUNT_ENV: str(optimiser_steps)}
    files = tuple(str(directory / f"step_{k}.pt") for k in range(1, optimiser_steps + 1))
    return replace(local, launch=replace(local.launch, env=env), step_params=files)


def gpu_count(python: str) -> int:
    """The GPUs ``python``'s torch sees; StandinsError when it cannot say."""
    try:
        done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StandinsError(f"{python}: cannot ask it for its GPUs ({exc})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise StandinsError(f"{python}: cannot ask it for its GPUs ({last})")
    return int(done.stdout.split()[-1])


def _require_examples(framework: str, python: str, folder: str, entry: str = "__main__.py") -> None:
    if not (EXAMPLES / folder / entry).is_file():
        stand_ins = folder.split("/")[0]
        raise StandinsError(
            f"{framework}: no GPU for {python}, and the CPU stand-ins (examples/{stand_ins} of a gmpo-plugins "
            f"checkout) are not at {EXAMPLES}; run it from a checkout, or on a GPU machine"
        )


def _verl(launch: Launch, python: str, folder: Path) -> LocalLaunch:
    if tuple(launch.argv[:3]) != VERL_MODULE:
        raise StandinsError(f"verl: expected a launch of {' '.join(VERL_MODULE)}, got {' '.join(launch.argv[:3])}")
    gpus = gpu_count(python)
    if gpus == 0:
        _require_examples("verl", python, "verl_cpu")
    ray_dir = tempfile.mkdtemp(prefix=RAY_DIR_PREFIX, dir="/tmp")
    overrides = [*launch.argv[3:], "trainer.n_gpus_per_node=1", f"+ray_kwargs.ray_init._temp_dir={ray_dir}"]
    if gpus > 0:
        return LocalLaunch(replace(launch, argv=(*VERL_MODULE, *overrides)), ray_dir=ray_dir)
    weights = folder / "weights"
    env = {**launch.env, "VERL_CPU_SAVE_WEIGHTS": str(weights)}
    argv = ("python3", "-m", "verl_cpu", *overrides)
    first_update = str(weights / "weights_0_1.pt")  # replica 0, after global step 1
    return LocalLaunch(replace(launch, argv=argv, env=env), VERL_STANDINS, (str(EXAMPLES),), ray_dir, first_update)


def _trl(launch: Launch, python: str, folder: Path) -> LocalLaunch:
    if gpu_count(python) > 0:
        return LocalLaunch(launch)
    _require_examples("trl", python, "trl_cpu")
    first_update = str(folder / "first_update.pt")
    env = {**launch.env, "TRL_CPU_FIRST_UPDATE": first_update}
    argv = ("python3", "-m", "trl_cpu", *launch.argv[1:])
    return LocalLaunch(replace(launch, argv=argv, env=env), TRL_STANDINS, (str(EXAMPLES),), None, first_update)


def _openrlhf(launch: Launch, python: str, folder: Path) -> LocalLaunch:
    if launch.argv[0] != OPENRLHF_SCRIPT:
        raise StandinsError(f"openrlhf: expected a launch of {OPENRLHF_SCRIPT}, got {launch.argv[0]}")
    gpus = gpu_count(python)
    standins = EXAMPLES / "openrlhf_cpu"
    fp32 = any(tuple(launch.argv[i : i + 2]) == FP32 for i in range(len(launch.argv)))
    if gpus > 0 and fp32:
        raise StandinsError(
            f"openrlhf: dtype float32 (--ds.param_dtype fp32) runs only with the CPU stand-ins, and {python} sees "
            f'{gpus} GPU(s); use dtype = "bfloat16" here (stock OpenRLHF trains in bf16 or fp16)'
        )
    if gpus == 0:
        _require_examples("openrlhf", python, "openrlhf_cpu/standins", "sitecustomize.py")
    ray_dir = tempfile.mkdtemp(prefix=RAY_DIR_PREFIX, dir="/tmp")
    argv = (*OPENRLHF_MODULE, *launch.argv[1:], *OPENRLHF_COUNTS)
    env = {**launch.env, "RAY_TMPDIR": ray_dir}
    if gpus > 0:
        return LocalLaunch(replace(launch, argv=argv, env=env), ray_dir=ray_dir)
    record = folder / OPENRLHF_RECORD
    cpu_env = _openrlhf_cpu_env(python, ray_dir, record)
    cpu = replace(launch, argv=(*argv, *OPENRLHF_CPU_ARGS), env={**env, **cpu_env})
    pythonpath = (str(standins / "standins"), str(standins / "shims"))
    return LocalLaunch(cpu, OPENRLHF_STANDINS, pythonpath, ray_dir, str(record / OPENRLHF_FIRST_SYNC))


def _openrlhf_cpu_env(python: str, ray_dir: str, record: Path) -> dict[str, str]:
    """The variables of an OpenRLHF run on the stand-ins (module docstring)."""
    bin_dir = os.path.dirname(python)
    return {
        "OPENRLHF_E2E_RAY": json.dumps({**OPENRLHF_RAY, "temp_dir": ray_dir}),
        OPENRLHF_RECORD_ENV: str(record),
        "TORCHDYNAMO_DISABLE": "1",
        "PATH": os.pathsep.join(filter(None, [bin_dir, os.environ.get("PATH")])),
        **_torch_extensions(bin_dir),
    }


def _torch_extensions(bin_dir: str) -> dict[str, str]:
    """``TORCH_EXTENSIONS_DIR`` in the virtualenv of ``bin_dir`` unless the environment names one (inherited)
    or that folder cannot be written (torch's own cache folder then)."""
    prefix = os.path.dirname(bin_dir)
    if "TORCH_EXTENSIONS_DIR" in os.environ or not os.access(prefix, os.W_OK):
        return {}
    return {"TORCH_EXTENSIONS_DIR": os.path.join(prefix, "torch_extensions")}


def _skyrl(launch: Launch, python: str, folder: Path) -> LocalLaunch:
    script = str(folder / SKYRL_SCRIPT)
    if tuple(launch.argv[:2]) != ("python3", script):
        raise StandinsError(f"skyrl: expected a launch of python3 {script}, got {' '.join(launch.argv[:2])}")
    if gpu_count(python) > 0:
        return LocalLaunch(launch)
    _require_examples("skyrl", python, "skyrl_cpu")
    ray_dir = tempfile.mkdtemp(prefix=RAY_DIR_PREFIX, dir="/tmp")
    options = ("--out", str(folder), "--save-params", "--reward", f"{script}:_reward")
    argv = ("python3", "-m", "skyrl_cpu", *options, *launch.argv[2:], *SKYRL_CPU_OVERRIDES)
    env = {**launch.env, "RAY_TMPDIR": ray_dir}
    pythonpath = (str(EXAMPLES), str(EXAMPLES / "skyrl_cpu" / "shims"))
    first_update = str(folder / SKYRL_FIRST_UPDATE)
    return LocalLaunch(replace(launch, argv=argv, env=env), SKYRL_STANDINS, pythonpath, ray_dir, first_update)


PLANS = {"verl": _verl, "openrlhf": _openrlhf, "trl": _trl, "skyrl": _skyrl}


def local_launch(launch: Launch, python: str, folder: Path, optimiser_steps: int = 1) -> LocalLaunch:
    """``launch`` (already filled with ``folder``, its output folder) as it runs here with
    ``python``; on the stand-ins, saving the parameters after each of RL step 1's
    ``optimiser_steps`` optimiser steps (module docstring)."""
    plan = PLANS.get(launch.framework)
    if plan is None:
        return LocalLaunch(launch)
    local = plan(launch, python, folder)
    return with_step_params(local, folder, optimiser_steps) if local.standins else local
