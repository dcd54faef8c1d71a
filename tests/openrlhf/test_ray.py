"""A local Ray cluster started with the runtime env ``gmpo-openrlhf`` builds: an actor (a
separate worker process that imports OpenRLHF itself, as PolicyModelActor does) sees the
patched PolicyLoss and computes the core's gmpo loss, with the bounds the driver's
``GMPO_PLUGINS_LOSS_HPARAMS`` gave (the worker gets it from the runtime env only: the
driver drops it before starting Ray). One test: starting Ray is slow."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from tests.openrlhf.batches import openrlhf_batch
from tests.openrlhf.test_cli import GROUP, record_ray_init

pytestmark = pytest.mark.ray


def test_ray_worker_sees_the_patched_policy_loss(loss_module, monkeypatch):
    import ray

    real_init = ray.init
    monkeypatch.setenv(OVERRIDE_ENV, '{"eps_low": 0.4, "eps_high": 0.4}')
    kwargs = record_ray_init(monkeypatch, ["--actor.policy_loss_type", "gmpo", *GROUP])
    monkeypatch.setattr(ray, "init", real_init)
    monkeypatch.delenv(OVERRIDE_ENV)  # not inherited: only the runtime env carries it
    assert not ray.is_initialized()
    temp = os.path.realpath(tempfile.gettempdir())
    if temp.startswith(os.path.realpath(sys.prefix) + os.sep):  # Ray's workers refuse a temp_dir in the venv
        kwargs["_temp_dir"] = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, **kwargs)
    try:

        @ray.remote(num_cpus=1)
        class Probe:  # defined here so Ray ships it by value
            def run(self, tensors):
                import os
                import sys

                finder_installed = any(type(f).__name__ == "_PostImportFinder" for f in sys.meta_path)
                imported_before = "openrlhf.models.loss" in sys.modules
                from openrlhf.models import PolicyLoss

                # OpenRLHF's default bounds (0.2): the override gives 0.4
                loss = PolicyLoss(token_level_loss=False, policy_loss_type="gmpo")(*tensors)[0]
                return {
                    "pid": os.getpid(),
                    "finder_installed": finder_installed,
                    "imported_before": imported_before,
                    "patched": bool(PolicyLoss.__dict__.get("__gmpo_plugins_patched__")),
                    "loss": float(loss),
                }

        batch = openrlhf_batch(8)
        tensors = (batch.log_probs.detach(), batch.old_log_probs, batch.advantages, batch.action_mask)
        result = ray.get(Probe.remote().run.remote(tensors), timeout=240)
    finally:
        ray.shutdown()

    assert result["pid"] != os.getpid()
    assert result["finder_installed"] and not result["imported_before"] and result["patched"]
    expected = get_loss("gmpo")(LossInputs(*tensors[:3], tensors[3].bool()), BatchInfo(), eps_low=0.4, eps_high=0.4)
    assert abs(result["loss"] - float(expected.loss)) <= 1e-6
    at_default = get_loss("gmpo")(LossInputs(*tensors[:3], tensors[3].bool()), BatchInfo(), eps_low=0.2, eps_high=0.2)
    assert abs(float(at_default.loss) - float(expected.loss)) > 1e-4  # the bounds matter on this batch
    assert torch.isfinite(expected.loss)
