"""A broken loss registry in a process where OpenRLHF's PolicyLoss is patched: asking for one of
our losses raises PluginLoadError naming the package, the patch and the original exception
(never OpenRLHF's "Invalid policy loss type" or another loss); OpenRLHF's own ppo still builds.
A fresh process (the registry loads once per process) with a gmpo_plugins plugin that claims
"gmpo" installed (tests/broken_plugins.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..broken_plugins import pythonpath_with, with_collider

PROBE = """
import json
from gmpo_plugins.adapters.openrlhf import install
install()
import openrlhf.models.loss as loss_module
ppo = loss_module.PolicyLoss(0.2, 0.2, policy_loss_type="ppo")
try:
    loss_module.PolicyLoss(0.4, 0.4, policy_loss_type="gmpo", token_level_loss=False)
except Exception as error:
    print(json.dumps({"type": type(error).__name__, "message": str(error), "ppo": ppo.policy_loss_type}))
"""


def test_a_colliding_plugin_makes_our_loss_fail_naming_it(tmp_path):
    env = dict(os.environ, PYTHONPATH=pythonpath_with(with_collider(tmp_path)))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["type"] == "PluginLoadError" and result["ppo"] == "ppo"
    message = result["message"]
    assert message.startswith(
        "gmpo_plugins: OpenRLHF --actor.policy_loss_type gmpo comes from the package gmpo-plugins "
        "(PolicyLoss patched by gmpo_plugins.adapters.openrlhf.install() or its Ray worker setup hook)"
    )
    assert "LossNameCollisionError" in message and "gmpo-collider" in message
