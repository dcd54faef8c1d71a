"""A broken install never turns into "Unsupported loss mode" or another loss in verl.

verl imports ``verl.plugins`` entry points at ``import verl`` and logs one that raises
only at DEBUG. Each case runs a fresh process that does nothing but ``import verl`` and
call the loss verl's ``get_policy_loss_fn`` returns, with the entry point declared by a
temporary distribution (a ``.dist-info`` folder on PYTHONPATH, selected with
``VERL_USE_EXTERNAL_PLUGINS`` so that the installed one does not interfere):

    colliding plugin an installed gmpo_plugins plugin that claims the name "gmpo": the
                     registry refuses that name only, naming both distributions; every
                     other loss_mode still runs our loss
    broken adapter   a copy of this package whose verl adapter raises at import
    Ray worker       the colliding plugin, seen from a Ray actor that imports verl
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gmpo_plugins
from gmpo_plugins.adapters import verl_plugin
from gmpo_plugins.adapters.load_failure import PluginLoadError
from gmpo_plugins.adapters.verl import registration
from gmpo_plugins.adapters.verl.policy_loss import MARKER

from ..broken_plugins import distribution, pythonpath_with, with_collider
from ..registry_names import builtin_losses
from .releases import needs_entry_points

PROBE_ENTRY_POINT = "gmpo_probe"
PROBE = """
import json, sys
import verl
from verl.trainer.ppo.core_algos import get_policy_loss_fn
fn = get_policy_loss_fn(sys.argv[1])
loss = getattr(fn, "__gmpo_plugins_loss__", None)
try:
    fn(old_log_prob=None, log_prob=None, advantages=None, response_mask=None)
except Exception as error:
    print(json.dumps({"type": type(error).__name__, "message": str(error), "loss": loss}))
"""


@pytest.fixture
def site(tmp_path):
    """A site folder declaring the probe's verl.plugins entry point (this package's)."""
    distribution(tmp_path, "gmpo-probe", f"[verl.plugins]\n{PROBE_ENTRY_POINT} = gmpo_plugins.adapters.verl_plugin\n")
    return tmp_path


def with_broken_adapter(site: Path) -> Path:
    """A copy of gmpo_plugins whose verl adapter raises at import, first on the path."""
    copy = site / "gmpo_plugins"
    shutil.copytree(Path(gmpo_plugins.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "adapters" / "verl" / "registration.py").write_text('raise ImportError("a broken copy of the adapter")\n')
    return site


def probe_env(site: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("VERL_USE_EXTERNAL")}
    env["PYTHONPATH"] = pythonpath_with(site)
    env["VERL_USE_EXTERNAL_PLUGINS"] = PROBE_ENTRY_POINT
    return env


def run_probe(site: Path, loss_mode: str) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, loss_mode],
        env=probe_env(site),
        cwd=site,  # `-c` puts the working directory first on sys.path
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def assert_names_the_failure(result: dict, loss_mode: str, *original: str) -> None:
    assert result["type"] == "PluginLoadError"
    message = result["message"]
    assert message.startswith(f"gmpo_plugins: verl loss_mode {loss_mode!r} comes from the package gmpo-plugins")
    assert "entry point 'verl.plugins: gmpo_plugins = gmpo_plugins.adapters.verl_plugin'" in message
    assert "which failed to load in this process" in message
    for text in original:
        assert text in message


COLLISION = "'gmpo' is registered by both distribution 'gmpo-plugins' and distribution 'gmpo-collider'"


def assert_refuses_the_colliding_name(result: dict) -> None:
    assert result["type"] == "LossNameCollisionError"
    assert COLLISION in result["message"] and "the name is refused (every other loss works)" in result["message"]


@needs_entry_points
@pytest.mark.parametrize("loss_mode", ["gmpo", "gmpo_plugins.gmpo"])
def test_a_colliding_plugin_refuses_that_name_naming_both_distributions(site, loss_mode):
    result, stderr = run_probe(with_collider(site), loss_mode)
    assert_refuses_the_colliding_name(result)
    assert COLLISION in stderr  # the registry's PluginLoadWarning when it loaded


@needs_entry_points
@pytest.mark.parametrize(("loss_mode", "loss"), [("gmpo_plugins.gspo", "gspo"), ("grpo", "grpo"), ("dapo", "dapo")])
def test_a_colliding_plugin_leaves_every_other_loss_working(site, loss_mode, loss):
    # our loss, failing only on the probe's None inputs with its own error
    result, _ = run_probe(with_collider(site), loss_mode)
    assert result["loss"] == loss and result["type"] not in ("PluginLoadError", "LossNameCollisionError")


@needs_entry_points
def test_a_broken_adapter_makes_our_losses_fail_naming_it(site):
    result, stderr = run_probe(with_broken_adapter(site), "gmpo")
    assert_names_the_failure(result, "gmpo", "ImportError: a broken copy of the adapter")
    assert "a broken copy of the adapter" in stderr


@needs_entry_points
def test_a_healthy_install_runs_our_loss_through_the_same_entry_point(site):
    # the same probe without a fault: the loss verl returns is ours and fails only on the
    # probe's None inputs (with our own error, not the stand-in's)
    result, _ = run_probe(site, "gmpo")
    assert result["type"] != "PluginLoadError"


def test_stand_ins_cover_every_builtin_and_are_replaced_by_a_later_registration(monkeypatch):
    import verl.trainer.ppo.core_algos as core_algos

    registry: dict = {}
    monkeypatch.setattr(core_algos, "POLICY_LOSS_REGISTRY", registry)
    registered = verl_plugin.register_stand_ins(ImportError("gone"))
    assert set(registered) == {name for loss in builtin_losses() for name in (loss, "gmpo_plugins." + loss)}
    with pytest.raises(PluginLoadError, match="ImportError: gone"):
        registry["gmpo"](old_log_prob=None)
    registration.register_losses(registry)
    assert getattr(registry["gmpo"], MARKER) == "gmpo"


@needs_entry_points
@pytest.mark.ray
def test_a_ray_worker_importing_verl_refuses_the_colliding_name_only(site):
    ray = pytest.importorskip("ray")
    env = probe_env(with_collider(site))

    @ray.remote(num_cpus=1)
    def ask(loss_mode):
        import verl  # noqa: F401 - the import loads the entry points in the worker
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        fn = get_policy_loss_fn(loss_mode)
        loss = getattr(fn, "__gmpo_plugins_loss__", None)
        try:
            fn(old_log_prob=None, log_prob=None, advantages=None, response_mask=None)
        except Exception as error:  # noqa: BLE001 - the error is what is checked
            return os.getpid(), {"type": type(error).__name__, "message": str(error), "loss": loss}
        return os.getpid(), {"type": None, "message": "", "loss": loss}

    runtime_env = {"env_vars": {key: env[key] for key in ("PYTHONPATH", "VERL_USE_EXTERNAL_PLUGINS")}}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    try:
        (pid, result), (_, other) = ray.get([ask.remote("gmpo"), ask.remote("gmpo_plugins.grpo")], timeout=240)
    finally:
        ray.shutdown()
    assert pid != os.getpid()
    assert_refuses_the_colliding_name(result)
    assert other["loss"] == "grpo" and other["type"] not in ("PluginLoadError", "LossNameCollisionError")


def test_registration_and_the_launch_check_refuse_a_claimed_name_only(monkeypatch):
    """In this process: a name the registry refuses becomes, in verl's registry, a stand-in
    raising the registry's LossNameCollisionError (bare and prefixed), which the launch check
    (``check_policy_loss``) reports before training; the other names stay ours."""
    import verl.trainer.ppo.core_algos as core_algos

    from gmpo_plugins.adapters.verl import VerlConfigError, check_policy_loss
    from gmpo_plugins.core.registry import LossNameCollisionError

    from . import engine

    message = "gmpo_plugins: loss 'shared' is registered by both distribution 'plug-a' and distribution 'plug-b'"
    monkeypatch.setattr(registration, "refused_losses", lambda: {"shared": message})
    registry: dict = {}
    monkeypatch.setattr(core_algos, "POLICY_LOSS_REGISTRY", registry)
    registration.register_losses()
    for name in ("shared", "gmpo_plugins.shared"):
        with pytest.raises(LossNameCollisionError, match="'plug-a' and distribution 'plug-b'"):
            registry[name](old_log_prob=None)
    assert getattr(registry["gmpo"], MARKER) == "gmpo" and getattr(registry["gmpo_plugins.gspo"], MARKER) == "gspo"
    with pytest.raises(VerlConfigError, match=r"loss_mode=shared: gmpo_plugins: loss 'shared' is registered by both"):
        check_policy_loss(engine.make_actor_config("shared"))
