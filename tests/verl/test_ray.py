"""A local Ray cluster: a worker process that imports verl finds our losses registered
(the verl.plugins entry point, no flag, no runtime_env). Ray is slow to start on small
machines (~20-30 s): this is the only Ray test."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray


def test_ray_actor_importing_verl_finds_gmpo():
    @ray.remote(num_cpus=1)
    class Probe:
        def losses(self):
            import verl  # noqa: F401 - the import alone must register our losses
            from verl.trainer.ppo.core_algos import get_policy_loss_fn

            fn = get_policy_loss_fn("gmpo")
            prefixed = get_policy_loss_fn("gmpo_plugins.gspo")
            return os.getpid(), fn.__module__, fn.__gmpo_plugins_loss__, prefixed.__gmpo_plugins_loss__

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        pid, module, gmpo, gspo = ray.get(Probe.remote().losses.remote(), timeout=240)
    finally:
        ray.shutdown()
    assert pid != os.getpid()
    assert (module, gmpo, gspo) == ("gmpo_plugins.adapters.verl.policy_loss", "gmpo", "gspo")
