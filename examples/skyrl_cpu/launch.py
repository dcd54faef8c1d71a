r"""``python -m skyrl_cpu [--out DIR] [--save-params] [--reward REF] <SkyRL overrides>``, or
``python -m skyrl_cpu --batch RUNS.json [--out DIR] [--save-params] [--reward REF]``: SkyRL's trainer
on CPU with the stand-ins of this package and gmpo-plugins' losses registered.

What SkyRL's ``main_base.main`` does, with these differences: Ray is started here with logical
GPUs (SkyRL's workers ask Ray for ``num_gpus=1``; nothing uses a GPU) and with this package and
its ``shims`` on every Ray process's PYTHONPATH; the experiment runs in this process
(``CPUExp``; SkyRL runs it in a Ray task) so that its logged metrics can be written to
``DIR/metrics.json`` (``steps``: step -> metrics, ``weight_versions``, ``wall_s``);
``--save-params`` also writes the policy's parameters after each step
(``DIR/params_step<N>.pt``). ``--batch`` takes ``{"name": [overrides], ...}`` and runs each in
turn in one Ray session (results in ``DIR/<name>/``; the workers and the engine of a run are
stopped before the next). A configuration the loss or SkyRL refuses exits with status 2 and one
line naming the setting, before Ray starts. ``--reward`` names a run spec's reward
(``FILE.py:FUNCTION`` or ``module:FUNCTION``, ``reward(response, answer) -> float``), which then
scores the responses in place of the digit fraction (``engine.SeededGenerator``); one that does
not resolve exits with status 2 as well.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SHIMS = os.path.join(HERE, "shims")


def _python_path() -> str:
    parts = [SHIMS, os.path.dirname(HERE), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    return os.pathsep.join(dict.fromkeys(part for part in parts if part))


def _jsonable(value: object) -> object:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value if not isinstance(value, float) or math.isfinite(value) else str(value)
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return str(value)


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our options and the SkyRL overrides (everything else, ``key=value``)."""
    parser = argparse.ArgumentParser(prog="python -m skyrl_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="skyrl_cpu_run", help="folder for the results (created)")
    parser.add_argument("--save-params", action="store_true", help="also save the parameters after each step")
    parser.add_argument("--batch", help="JSON file {name: [overrides]}: several runs in one Ray session")
    parser.add_argument("--num-cpus", type=int, default=4, help="logical CPUs given to Ray")
    parser.add_argument("--reward", help="reward(response, answer) -> float: FILE.py:FUNCTION or module:FUNCTION")
    return parser.parse_known_args(argv)


def load_config(overrides: list[str]) -> Any:
    """SkyRL's config from the overrides, validated by SkyRL and by the loss (ValueError or
    AssertionError naming the setting otherwise)."""
    from skyrl.train.config import SkyRLTrainConfig

    from gmpo_plugins.adapters.skyrl.entrypoint import check_config

    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    check_config(cfg)
    return cfg


def _remove_placement_groups() -> None:
    """Free the placement groups a run's actor groups created (SkyRL makes one for a policy
    with several ranks and leaves it to the end of the Ray session)."""
    from ray.util import placement_group_table, remove_placement_group
    from ray.util.placement_group import PlacementGroup

    for pg_id, info in placement_group_table().items():
        if info.get("state") != "REMOVED":
            remove_placement_group(PlacementGroup(_placement_group_id(pg_id)))


def _placement_group_id(hex_id: str):
    """Ray's PlacementGroupID from its hex form."""
    from ray._raylet import PlacementGroupID

    return PlacementGroupID.from_hex(hex_id)


def run_one(cfg: Any, out: str, save_params: bool, reward: Callable[[str, str], float] | None = None) -> dict[str, Any]:
    """One run of SkyRL's trainer in the current Ray session; returns what metrics.json holds."""
    import ray

    from skyrl_cpu.engine import start_engine
    from skyrl_cpu.experiment import CPUExp

    os.makedirs(out, exist_ok=True)
    start = time.monotonic()
    engine = start_engine(cfg.trainer.policy.model.path)
    exp = None
    try:
        exp = CPUExp(cfg, engine, params_dir=out if save_params else None, reward=reward)
        exp.run()
        versions = ray.get(engine.weight_version.remote())
    finally:
        trainer = getattr(exp, "trainer", None)
        for group in (getattr(trainer, "policy_model", None), getattr(trainer, "ref_model", None)):
            for actor in getattr(group, "_actor_handlers", []):
                ray.kill(actor)
        ray.kill(engine)
        _remove_placement_groups()
    result = {
        "steps": {str(k): {n: _jsonable(v) for n, v in m.items()} for k, m in exp.recorder.logs.items()},
        "weight_versions": versions,
        "wall_s": time.monotonic() - start,
    }
    with open(os.path.join(out, "metrics.json"), "w") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run SkyRL's trainer on CPU; returns the exit status."""
    args, overrides = parse(sys.argv[1:] if argv is None else argv)
    os.environ["PYTHONPATH"] = _python_path()
    sys.path[:0] = [SHIMS]
    from gmpo_plugins.adapters.skyrl import SkyRLConfigError, register_losses
    from gmpo_plugins.frameworks.reward import RewardError, load_reward

    register_losses()
    try:
        reward = load_reward(args.reward, Path.cwd()).function if args.reward else None
    except RewardError as exc:
        print(f"python -m skyrl_cpu: --reward: {exc}", file=sys.stderr)
        return 2
    if args.batch:
        with open(args.batch) as handle:
            runs = {name: [*overrides, *extra] for name, extra in json.load(handle).items()}
    else:
        runs = {"": overrides}
    try:
        configs = {name: load_config(run) for name, run in runs.items()}
    except (AssertionError, ValueError, TypeError, SkyRLConfigError) as exc:
        print(f"python -m skyrl_cpu: invalid configuration: {exc}", file=sys.stderr)
        return 2

    import ray
    from skyrl.backends.skyrl_train.utils.ppo_utils import sync_registries

    world = max(
        c.trainer.placement.policy_num_gpus_per_node * c.trainer.placement.policy_num_nodes for c in configs.values()
    )
    env = {"PYTHONPATH": os.environ["PYTHONPATH"], "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for name in ("SKYRL_CPU_OPTIMIZER", "TORCHDYNAMO_DISABLE"):
        if name in os.environ:
            env[name] = os.environ[name]
    ray.init(num_cpus=args.num_cpus, num_gpus=world, include_dashboard=False, runtime_env={"env_vars": env})
    try:
        sync_registries()
        for name, cfg in configs.items():
            run_one(cfg, os.path.join(args.out, name), args.save_params, reward)
    finally:
        ray.shutdown()
    return 0
