"""A local Ray cluster: a Ray worker process finds our losses through SkyRL's registry
actor, as SkyRL's policy worker looks its loss up (``PolicyLossRegistry.get``), and
computes with them. Ray is slow to start on small machines (~20-30 s)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV, forward_override

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray


def test_ray_worker_gets_our_loss_through_the_registry_actor(registered, monkeypatch):
    """... with SkyRL's default eps_clip (0.2) and the driver's GMPO_PLUGINS_LOSS_HPARAMS giving
    0.4, carried to the worker by the runtime env only (the driver drops it before ray.init)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import sync_registries

    @ray.remote(num_cpus=1)
    class Probe:
        def run(self):
            import torch
            from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
            from skyrl.train.config import AlgorithmConfig

            fn = PolicyLossRegistry.get("gmpo")  # what PolicyWorkerBase.__init__ does
            config = AlgorithmConfig(policy_loss_type="gmpo", loss_reduction="sequence_mean")
            new = torch.tensor([[0.5, 0.3]], dtype=torch.float64)
            loss, metrics = fn(
                new,
                torch.zeros(1, 2, dtype=torch.float64),
                torch.full((1, 2), 0.5, dtype=torch.float64),
                config=config,
                loss_mask=torch.ones(1, 2),
            )
            prefixed = PolicyLossRegistry.get("gmpo_plugins.gspo")
            return os.getpid(), type(fn).__module__, fn.loss, prefixed.loss, float(loss), metrics["clip_ratio"]

    monkeypatch.setenv(OVERRIDE_ENV, '{"eps_low": 0.4, "eps_high": 0.4}')
    runtime_env = {"env_vars": forward_override({})}  # what our entry point makes SkyRL's initialize_ray pass
    monkeypatch.delenv(OVERRIDE_ENV)
    temp_dir = tempfile.mkdtemp(prefix="ray_skyrl_", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir, runtime_env=runtime_env)
    try:
        sync_registries()  # what SkyRL's initialize_ray does right after ray.init
        pid, module, gmpo, gspo, loss, clip_ratio = ray.get(Probe.remote().run.remote(), timeout=240)
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert pid != os.getpid()
    assert (module, gmpo, gspo) == ("gmpo_plugins.adapters.skyrl.policy_loss", "gmpo", "gspo")
    # -exp(0.35), as test_gmpo_eps_is_log_space with eps 0.4; at 0.2 it would be -exp((0.2 + 0.2) / 2)
    assert loss == pytest.approx(-1.4190675485932571, abs=1e-12)
    assert clip_ratio == 0.5


def test_ray_worker_with_a_colliding_plugin_refuses_that_name_only(registered, tmp_path):
    """Our losses synced through the registry actor into a worker whose environment has a
    gmpo_plugins plugin claiming "gmpo": calling "gmpo" raises the registry's
    LossNameCollisionError naming both distributions (not SkyRL's unknown-loss error, not
    another loss); every other loss runs in the same worker."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import sync_registries

    from ..broken_plugins import pythonpath_with, with_collider

    @ray.remote(num_cpus=1)
    def ask(name):
        import torch
        from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
        from skyrl.train.config import AlgorithmConfig

        fn = PolicyLossRegistry.get(name)
        config = AlgorithmConfig(policy_loss_type=name, loss_reduction="sequence_mean")
        try:
            loss, _ = fn(
                torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), config=config, loss_mask=torch.ones(1, 2)
            )
        except Exception as error:  # noqa: BLE001 - the error is what is checked
            return os.getpid(), type(error).__name__, str(error)
        return os.getpid(), None, float(loss)

    temp_dir = tempfile.mkdtemp(prefix="ray_skyrl_", dir="/tmp")
    runtime_env = {"env_vars": {"PYTHONPATH": pythonpath_with(with_collider(tmp_path))}}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir, runtime_env=runtime_env)
    try:
        sync_registries()
        (pid, kind, message), other = ray.get([ask.remote("gmpo"), ask.remote("gmpo_plugins.gspo")], timeout=240)
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert pid != os.getpid()
    assert kind == "LossNameCollisionError"
    assert "'gmpo' is registered by both distribution 'gmpo-plugins' and distribution 'gmpo-collider'" in message
    # gspo at ratio 1 (w = 1): SkyRL's sequence_mean scaling undone, the core's advantage is
    # 1 * |o| = 2, with unit counts the loss is -2 * 1 / 1 = -2
    assert other[1:] == (None, pytest.approx(-2.0, abs=1e-12))
