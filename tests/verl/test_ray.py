"""A local Ray cluster: a worker process that imports verl finds our losses registered
(verl 0.9: the verl.plugins entry point, no flag, no runtime_env; verl 0.8, which loads no entry
point: VERL_USE_EXTERNAL_MODULES in the runtime_env, as its users set it). Ray is slow to start
on small machines (~20-30 s): this is the only Ray test."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

from .releases import RELEASE  # noqa: E402


def test_ray_actor_importing_verl_finds_gmpo(monkeypatch):
    @ray.remote(num_cpus=1)
    class Probe:
        def losses(self):
            import verl  # noqa: F401 - the import alone must register our losses
            from verl.trainer.ppo.core_algos import get_policy_loss_fn

            fn = get_policy_loss_fn("gmpo")
            prefixed = get_policy_loss_fn("gmpo_plugins.gspo")
            return os.getpid(), fn.__module__, fn.__gmpo_plugins_loss__, prefixed.__gmpo_plugins_loss__

    for key in ("VERL_USE_EXTERNAL_MODULES", "VERL_USE_EXTERNAL_PLUGINS"):  # the workers inherit the driver's
        monkeypatch.delenv(key, raising=False)
    env_vars = {} if RELEASE.entry_points else {"VERL_USE_EXTERNAL_MODULES": "gmpo_plugins.adapters.verl"}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env_vars})
    try:
        pid, module, gmpo, gspo = ray.get(Probe.remote().losses.remote(), timeout=240)
    finally:
        ray.shutdown()
    assert pid != os.getpid()
    assert (module, gmpo, gspo) == ("gmpo_plugins.adapters.verl.policy_loss", "gmpo", "gspo")
