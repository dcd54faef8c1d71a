"""Run several verl trainings on the CPU in one Ray session (the test driver).

    python tests/verl_e2e/batch.py RUNS.json

RUNS.json: ``{"runs": [{"name": ..., "overrides": [...], "output_dir": dir}, ...]}``; a run's
metrics (verl's file logger) and weights (the CPU rollout server) go to its folder. Each
run is exactly ``python -m verl_cpu <overrides>`` (examples/verl_cpu/launch.py: verl's
``run_ppo`` with its v1 task runner, or the deprecated legacy one with ``trainer.use_v1=false``;
a fresh task runner and fresh workers per run); sharing
the driver and the Ray instance saves their start-up (about a third of a run). Between runs
the driver waits until Ray has every resource back, so no run starts while the previous
one's actors are still being torn down, and removes its placement groups (Ray ties them to
the job, i.e. to this driver, not to verl's task runner that made them).

The output separates the runs with lines ``=== run <name> ===`` and ``=== end <name> ok|failed
(<seconds> s) ===``; a failed run does not stop the others.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

RELEASE_TIMEOUT_S = 180


def _release_placement_groups(ray) -> None:
    """Remove the finished run's placement groups: verl creates them in its task runner, but
    Ray scopes them to the job (this driver), so they would outlive the run."""
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, placement_group_table, remove_placement_group

    for pg_id, info in placement_group_table().items():
        if info.get("state") != "REMOVED":
            remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(pg_id))))


def _wait_until_released(ray, total: dict) -> None:
    """Block until Ray's free CPUs/GPUs equal the totals and no named actor is left."""
    _release_placement_groups(ray)
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while time.monotonic() < deadline:
        free = ray.available_resources()
        if all(free.get(key, 0) >= total[key] for key in ("CPU", "GPU")) and not ray.util.list_named_actors():
            return
        time.sleep(0.5)
    raise TimeoutError(f"Ray did not release the previous run's resources within {RELEASE_TIMEOUT_S} s")


def main(path: str) -> int:
    from verl_cpu import launch  # type: ignore[import-not-found]

    with open(path) as handle:
        runs = json.load(handle)["runs"]
    launch.prepare_environment()
    import importlib

    importlib.import_module(launch.PACKAGE)
    import ray
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl_cpu.rollout import SAVE_WEIGHTS_ENV  # type: ignore[import-not-found]

    failures = 0
    total = None
    for run in runs:
        name = run["name"]
        print(f"=== run {name} ===", flush=True)
        start = time.monotonic()
        try:
            config = launch.compose(run["overrides"])
            launch.check_resources(config)
            launch.check_loss(config)
            validate_config(
                config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
            )
            output = run["output_dir"]
            os.makedirs(output, exist_ok=True)
            env_vars = {
                SAVE_WEIGHTS_ENV: output,
                "VERL_FILE_LOGGER_PATH": os.path.join(output, "metrics.jsonl"),
                "GMPO_RECORD_DIR": os.path.join(output, "loss_calls"),  # recording_loss.py
            }
            runner = launch.task_runner(config).options(runtime_env={"env_vars": env_vars})
            run_ppo(config, task_runner_class=runner)
            del runner
            status = "ok"
        except Exception:  # noqa: BLE001 - reported, and the next run still runs
            traceback.print_exc()
            status = "failed"
            failures += 1
        if ray.is_initialized():
            total = total or ray.cluster_resources()
            _wait_until_released(ray, total)
        print(f"=== end {name} {status} ({time.monotonic() - start:.1f} s) ===", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
