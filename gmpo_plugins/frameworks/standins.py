"""How a framework's launch runs on this machine: as translated where the framework's
interpreter sees a GPU, with the CPU stand-ins of a gmpo-plugins checkout where it sees none.

    framework  no GPU                                        always
    verl       ``python3 -m verl_cpu`` in place of            ``trainer.n_gpus_per_node=1`` (one
               ``python3 -m verl.trainer.main_ppo``,          rank: the spec names no device
               ``examples/`` on PYTHONPATH: verl's own        count); Ray's files in a fresh
               trainer with the stand-ins of                  folder (``ray_dir``), so that every
               ``examples/verl_cpu`` (CPU platform, gloo      process the run leaves can be
               process group, HF-generate rollout server)     found and ended
    trl        nothing: TRL's GRPOTrainer runs on CPU as it is

The GPU count is asked of the framework's own interpreter (``torch.cuda.device_count()``).
The stand-ins are no part of the installed package: without a checkout's ``examples/`` a
verl run on a machine without a GPU is refused (``StandinsError``) before anything starts.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from gmpo_plugins.frameworks.launch import Launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # in a checkout of gmpo-plugins
VERL_STANDINS = "examples/verl_cpu (CPU platform, gloo process group, HF-generate rollout server)"
VERL_MODULE = ("python3", "-m", "verl.trainer.main_ppo")
PROBE = "import torch; print(torch.cuda.device_count())"
PROBE_TIMEOUT_S = 300.0
RAY_DIR_PREFIX = "gmpo-ray-"  # under /tmp: Ray's socket paths must stay short


class StandinsError(RuntimeError):
    """A launch that cannot run here: no GPU and no stand-ins, or an interpreter that fails."""


@dataclass(frozen=True)
class LocalLaunch:
    """A launch as it runs here: ``standins`` names what stood in for the GPU ("" for none),
    ``pythonpath`` the folders its processes import them from; ``ray_dir`` is the folder of
    the Ray instance the run starts (None without Ray)."""

    launch: Launch
    standins: str = ""
    pythonpath: tuple[str, ...] = ()
    ray_dir: str | None = None


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


def local_launch(launch: Launch, python: str) -> LocalLaunch:
    """``launch`` (already filled with its folder) as it runs here with ``python`` (module docstring)."""
    if launch.framework != "verl":
        return LocalLaunch(launch)
    if tuple(launch.argv[:3]) != VERL_MODULE:
        raise StandinsError(f"verl: expected a launch of {' '.join(VERL_MODULE)}, got {' '.join(launch.argv[:3])}")
    gpus = gpu_count(python)
    if gpus == 0 and not (EXAMPLES / "verl_cpu" / "launch.py").is_file():
        raise StandinsError(
            f"verl: no GPU for {python}, and the CPU stand-ins (examples/verl_cpu of a gmpo-plugins checkout) "
            f"are not at {EXAMPLES}; run it from a checkout, or on a GPU machine"
        )
    ray_dir = tempfile.mkdtemp(prefix=RAY_DIR_PREFIX, dir="/tmp")
    overrides = [*launch.argv[3:], "trainer.n_gpus_per_node=1", f"+ray_kwargs.ray_init._temp_dir={ray_dir}"]
    if gpus > 0:
        return LocalLaunch(replace(launch, argv=(*VERL_MODULE, *overrides)), ray_dir=ray_dir)
    argv = ("python3", "-m", "verl_cpu", *overrides)
    return LocalLaunch(replace(launch, argv=argv), VERL_STANDINS, (str(EXAMPLES),), ray_dir)
