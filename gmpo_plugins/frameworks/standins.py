"""How a framework's launch runs on this machine: as translated where the framework's
interpreter sees a GPU, with the CPU stand-ins of a gmpo-plugins checkout where it sees none.

    framework  no GPU                                        always
    verl       ``python3 -m verl_cpu`` in place of            ``trainer.n_gpus_per_node=1`` (one
               ``python3 -m verl.trainer.main_ppo``,          rank: the spec names no device
               ``examples/`` on PYTHONPATH: verl's own        count); Ray's files in a fresh
               trainer with the stand-ins of                  folder (``ray_dir``), so that every
               ``examples/verl_cpu`` (CPU platform, gloo      process the run leaves can be
               process group, HF-generate rollout server)     found and ended
    trl        ``python3 -m trl_cpu SCRIPT``: TRL's own
               GRPOTrainer (it runs on CPU as it is) with
               the seeded ``rollout_func`` of
               ``examples/trl_cpu``

Every CPU rollout stand-in samples with ``examples/seeded_generation.py`` (seed from the prompt's
token ids and the sample's index for that prompt), so frameworks that hold the same weights draw
the same responses, and each leaves the parameters after the first optimiser step in its
folder (``LocalLaunch.first_update``): verl's rollout server saves every weight version it
receives (``VERL_CPU_SAVE_WEIGHTS``), TRL's callback the model after step 1
(``TRL_CPU_FIRST_UPDATE``).

The GPU count is asked of the framework's own interpreter (``torch.cuda.device_count()``).
The stand-ins are no part of the installed package: without a checkout's ``examples/`` a
run on a machine without a GPU is refused (``StandinsError``) before anything starts.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from gmpo_plugins.frameworks.launch import Launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # in a checkout of gmpo-plugins
VERL_STANDINS = "examples/verl_cpu (CPU platform, gloo process group, HF-generate rollout server)"
TRL_STANDINS = "examples/trl_cpu (seeded rollout_func: the rollouts of the other frameworks' stand-ins)"
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
    the Ray instance the run starts (None without Ray); ``first_update`` the file in which
    the stand-ins leave the parameters after the first optimiser step ("" for none)."""

    launch: Launch
    standins: str = ""
    pythonpath: tuple[str, ...] = ()
    ray_dir: str | None = None
    first_update: str = ""


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


def _require_examples(framework: str, python: str, module: str) -> None:
    if not (EXAMPLES / module / "__main__.py").is_file():
        raise StandinsError(
            f"{framework}: no GPU for {python}, and the CPU stand-ins (examples/{module} of a gmpo-plugins checkout) "
            f"are not at {EXAMPLES}; run it from a checkout, or on a GPU machine"
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


PLANS = {"verl": _verl, "trl": _trl}


def local_launch(launch: Launch, python: str, folder: Path) -> LocalLaunch:
    """``launch`` (already filled with ``folder``, its output folder) as it runs here with
    ``python`` (module docstring)."""
    plan = PLANS.get(launch.framework)
    return LocalLaunch(launch) if plan is None else plan(launch, python, folder)
