"""How verl finds our losses: the verl.plugins entry point, external modules, names."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn

from gmpo_plugins import list_losses
from gmpo_plugins.adapters.verl import PREFIX, VERL_NAMES, is_ours, register_losses
from gmpo_plugins.adapters.verl.__main__ import table

from .releases import RELEASE

# verl's own losses (verl 0.8 ships no dro)
VERL_BUILTINS = ("vanilla", "gspo", "geo_mean", "dppo_tv", "dppo_kl", "sapo", "gpg", "clip_cov", "kl_cov") + (
    ("dro",) if RELEASE.dro_beta else ()
)

# The child imports nothing but verl (plus, where asked, the function verl uses for
# actor_rollout_ref.model.external_lib), then reports what verl's registry holds.
PROBE = """
import json, sys
import verl
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
names = ("gmpo", "gmpo_plugins.gspo")
before = {name: getattr(POLICY_LOSS_REGISTRY.get(name), "__gmpo_plugins_loss__", None) for name in names}
if len(sys.argv) > 1:
    from verl.utils.import_utils import import_external_libs
    import_external_libs(sys.argv[1])
from verl.trainer.ppo.core_algos import get_policy_loss_fn
fn = get_policy_loss_fn("gmpo")
print(json.dumps({"before": before, "gmpo": getattr(fn, "__gmpo_plugins_loss__", None), "module": fn.__module__}))
"""


def _probe(env_update: dict, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    env.update(env_update)
    return subprocess.Popen(
        [sys.executable, "-c", PROBE, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_fresh_processes_find_gmpo_through_each_loading_path():
    """(a) plain `import verl` (the verl.plugins entry point; verl 0.8 loads none, so there verl
    says "Unsupported loss mode"); (b) plugins disabled, then the external_lib import; (c) plugins
    disabled, VERL_USE_EXTERNAL_MODULES (0.8 has no VERL_USE_EXTERNAL_PLUGINS: (b) and (c) are its
    two paths). Run in parallel."""
    adapter = "gmpo_plugins.adapters.verl"
    entry_point = _probe({})
    external_lib = _probe({"VERL_USE_EXTERNAL_PLUGINS": "none"}, adapter)
    env_module = _probe({"VERL_USE_EXTERNAL_PLUGINS": "none", "VERL_USE_EXTERNAL_MODULES": adapter})

    if RELEASE.entry_points:
        result = _result(entry_point)
        assert result["before"] == {"gmpo": "gmpo", "gmpo_plugins.gspo": "gspo"}
        assert result["gmpo"] == "gmpo" and result["module"] == "gmpo_plugins.adapters.verl.policy_loss"
    else:
        _, err = entry_point.communicate(timeout=240)
        assert entry_point.returncode == 1 and "ValueError: Unsupported loss mode: gmpo." in err, err[-3000:]

    result = _result(external_lib)
    assert result["before"] == {"gmpo": None, "gmpo_plugins.gspo": None}  # autoloading really was off
    assert result["gmpo"] == "gmpo"

    result = _result(env_module)
    assert result["before"] == {"gmpo": "gmpo", "gmpo_plugins.gspo": "gspo"}
    assert result["gmpo"] == "gmpo"


def test_every_registry_loss_has_a_prefixed_name_and_builtins_are_not_shadowed():
    builtin_functions = {name: fn for name, fn in POLICY_LOSS_REGISTRY.items() if not is_ours(fn)}
    assert set(VERL_BUILTINS) <= set(builtin_functions)
    for spec in list_losses():
        fn = get_policy_loss_fn(PREFIX + spec.name)
        assert is_ours(fn) and fn.__gmpo_plugins_loss__ == spec.name
        if spec.name not in builtin_functions:
            assert get_policy_loss_fn(spec.name).__gmpo_plugins_loss__ == spec.name
    # verl's built-ins are still verl's own functions
    for name in VERL_BUILTINS:
        fn = POLICY_LOSS_REGISTRY[name]
        assert fn.__module__ == core_algos.__name__ and getattr(core_algos, fn.__name__) is fn
    gspo = next(name for name in VERL_NAMES if name.loss == "gspo")
    assert gspo.bare is None and "verl's built-in" in gspo.taken_by and "compute_policy_loss_gspo" in gspo.taken_by


def test_registration_is_idempotent():
    before = dict(POLICY_LOSS_REGISTRY)
    again = register_losses()
    assert list(POLICY_LOSS_REGISTRY) == list(before)
    assert again == VERL_NAMES
    for name, fn in before.items():
        assert is_ours(POLICY_LOSS_REGISTRY[name]) == is_ours(fn)
        if not is_ours(fn):
            assert POLICY_LOSS_REGISTRY[name] is fn


def test_a_name_taken_by_another_plugin_is_not_shadowed():
    def other_gmpo(**kwargs):
        raise AssertionError("not called")

    registry = {"gmpo": other_gmpo}
    names = {name.loss: name for name in register_losses(registry)}
    assert registry["gmpo"] is other_gmpo
    assert is_ours(registry["gmpo_plugins.gmpo"])
    assert names["gmpo"].bare is None and names["gmpo"].taken_by.endswith("other_gmpo")
    assert names["grpo"].bare == "grpo" and is_ours(registry["grpo"])


def test_signature_is_verls():
    ours = inspect.signature(get_policy_loss_fn("gmpo")).parameters
    vanilla = inspect.signature(core_algos.compute_policy_loss_vanilla).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == [
        (p.name, p.kind, p.default) for p in vanilla.values()
    ]


def test_name_table_tells_which_name_to_use():
    lines = {line.split()[0]: line for line in table().splitlines()[1:]}
    assert set(lines) == {spec.name for spec in list_losses()}
    assert "gmpo  or  gmpo_plugins.gmpo" in lines["gmpo"]
    assert lines["gspo"].split()[1] == "gmpo_plugins.gspo" and "verl's built-in" in lines["gspo"]


def test_a_failing_registration_is_logged_before_verl_swallows_it(monkeypatch, caplog):
    import gmpo_plugins.adapters.verl as adapter

    def broken():
        raise RuntimeError("broken plugin")

    monkeypatch.setattr(adapter, "register_losses", broken)
    with pytest.raises(RuntimeError, match="broken plugin"):
        adapter._register()
    assert any("registering the gmpo-plugins losses into verl failed" in r.getMessage() for r in caplog.records)
    assert any(r.levelname == "ERROR" and "broken plugin" in (r.exc_text or "") for r in caplog.records)


def test_a_loss_needing_an_input_verl_is_not_given_is_refused_by_name():
    """decoupled_ppo reads rollout log-probs (``LossSpec.requires``), which the adapter does not
    pass: the translation of its settings refuses it first, before the config is read."""
    from gmpo_plugins import get_loss
    from gmpo_plugins.adapters.verl.options import VerlConfigError, resolution_from_config

    needs = (
        "^gmpo_plugins: decoupled_ppo needs the rollout engine's log-probs, which the verl adapter does not pass yet$"
    )
    with pytest.raises(VerlConfigError, match=needs):
        resolution_from_config(get_loss("decoupled_ppo"), None, "token-mean", "gmpo_plugins.decoupled_ppo")


DRIVER_CHECK_PROBE = """
import json
import verl
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.utils import config
print(json.dumps({"checked": getattr(config.validate_config, "__gmpo_plugins_checks_the_policy_loss__", False),
                  "gmpo": getattr(get_policy_loss_fn("gmpo"), "__gmpo_plugins_loss__", None)}))
"""


@pytest.mark.parametrize(
    ("module", "checked"), [("gmpo_plugins.adapters.verl_plugin", True), ("gmpo_plugins.adapters.verl", False)]
)
def test_external_modules_install_the_driver_check_only_through_the_entry_points_module(module, checked):
    """With plugin autoloading off (verl 0.9) or absent (verl 0.8), VERL_USE_EXTERNAL_MODULES naming the
    entry point's module (``verl_plugin``) registers the losses and installs the driver-side check into
    verl's validate_config, as the entry point does; naming the adapter registers the losses only."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("VERL_USE_EXTERNAL")}
    env.update(VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES=module)
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER_CHECK_PROBE], env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"checked": checked, "gmpo": "gmpo"}
