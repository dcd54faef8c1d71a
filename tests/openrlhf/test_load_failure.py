"""A gmpo_plugins plugin that claims "gmpo" (tests/broken_plugins.py), in a fresh process where
OpenRLHF's PolicyLoss is patched (the registry loads once per process): asking for "gmpo"
raises the registry's LossNameCollisionError naming both distributions (never OpenRLHF's
"Invalid policy loss type" or another loss); every other registry loss and OpenRLHF's own
ppo still build."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..broken_plugins import pythonpath_with, with_collider

PROBE = """
import json
from gmpo_plugins.adapters.openrlhf import install
from gmpo_plugins.adapters.openrlhf.patch import PLAN
install()
import openrlhf.models.loss as loss_module
ppo = loss_module.PolicyLoss(0.2, 0.2, policy_loss_type="ppo")
grpo = loss_module.PolicyLoss(0.2, 0.2, policy_loss_type="gmpo_plugins.grpo")
try:
    loss_module.PolicyLoss(0.4, 0.4, policy_loss_type="gmpo", token_level_loss=False)
except Exception as error:
    print(json.dumps({"type": type(error).__name__, "message": str(error), "ppo": ppo.policy_loss_type,
                      "grpo": grpo.__dict__[PLAN].spec.name}))
"""


def test_a_colliding_plugin_refuses_that_name_only(tmp_path):
    env = dict(os.environ, PYTHONPATH=pythonpath_with(with_collider(tmp_path)))
    proc = subprocess.run(
        [sys.executable, "-W", "ignore::UserWarning", "-c", PROBE],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["type"] == "LossNameCollisionError"
    assert (result["ppo"], result["grpo"]) == ("ppo", "grpo")
    assert (
        "'gmpo' is registered by both distribution 'gmpo-plugins' and distribution 'gmpo-collider'"
        in (result["message"])
    )
