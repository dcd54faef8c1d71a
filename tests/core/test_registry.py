"""The pluggy registry: entry-point discovery, collisions, broken plugins, autoload switch."""

from __future__ import annotations

import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from gmpo_plugins import LossNameCollisionError, PluginLoadWarning, UnknownLossError, get_loss, list_losses
from gmpo_plugins.adapters.names import BUILTIN_LOSS_NAMES
from gmpo_plugins.core.registry import LossRegistry

from .batches import random_batch

# the built-in set, pinned here once; other tests read it from the registry (tests/registry_names.py)
BUILTINS = {
    *("gmpo", "gmpo_noclip", "gmpo_seqclip", "gmpo_nonorm", "grpo", "dapo", "dr_grpo", "gspo"),
    *("cispo", "sapo", "gpg", "dro", "dppo_tv", "dppo_kl", "clip_cov", "kl_cov", "luspo", "vespo"),
    *("rollout_is", "importance_sampling", "topr", "decoupled_ppo", "m2po", "prime_rl", "prime_ipo"),
    *("fipo", "real"),
}


def test_builtins_are_registered_by_gmpo_plugins():
    providers = {spec.name: spec.provider for spec in list_losses()}
    assert BUILTINS <= set(providers)
    assert {providers[name] for name in BUILTINS} == {"gmpo-plugins"}


def test_installed_example_plugin_is_discovered_through_its_entry_point():
    spec = get_loss("example_reinforce")  # tests/plugins/example_plugin, installed by the nox session
    assert spec.provider == "gmpo-example-plugin"
    inputs = random_batch(3, 4, seed=2)
    out = spec(inputs)
    expected = -(inputs.advantages[:, None] * inputs.log_probs)[inputs.mask].mean()
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-12)


def test_unknown_name_lists_valid_names_and_suggests_a_close_one():
    with pytest.raises(UnknownLossError) as info:
        get_loss("gmop")
    message = str(info.value)
    assert isinstance(info.value, KeyError)
    assert "unknown loss 'gmop'" in message and "did you mean 'gmpo'?" in message
    for name in BUILTINS:
        assert name in message


class FakeSite:
    """A directory on sys.path holding real (minimal) installed distributions."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        monkeypatch.syspath_prepend(str(root))

    def add(self, distribution: str, module: str, source: str) -> None:
        info = self.root / f"{distribution.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[gmpo_plugins]\nlosses = {module}\n")
        (self.root / f"{module}.py").write_text(textwrap.dedent(source))


PLUGIN_SOURCE = """
from gmpo_plugins import LossSpec, hookimpl, get_loss
from gmpo_plugins.core.losses.gmpo import gmpo_loss

@hookimpl
def gmpo_plugins_losses():
    return [LossSpec(name={name!r}, fn=gmpo_loss, description="copy", defaults={{"eps_low": 0.4,
            "eps_high": 0.4, "kl_beta": 0.0, "kl_estimator": "k3", "log_ratio_bound": 20.0}})]
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    for module in ("plug_a", "plug_b", "plug_broken", "plug_raises"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    return FakeSite(tmp_path, monkeypatch)


def test_third_party_loss_is_usable(site):
    site.add("plug-a", "plug_a", PLUGIN_SOURCE.format(name="my_gmpo"))
    registry = LossRegistry(autoload=True)
    assert registry.get("my_gmpo").provider == "plug-a"
    inputs = random_batch(4, 5, seed=4)
    assert registry.get("my_gmpo")(inputs).loss.item() == pytest.approx(get_loss("gmpo")(inputs).loss.item())


def test_two_distributions_claiming_one_name_refuse_that_name_only(site):
    site.add("plug-a", "plug_a", PLUGIN_SOURCE.format(name="shared"))
    site.add("plug-b", "plug_b", PLUGIN_SOURCE.format(name="shared"))
    site.add("plug-c", "plug_c", PLUGIN_SOURCE.format(name="my_gmpo"))
    with pytest.warns(PluginLoadWarning, match=r"'shared' is registered by both distribution 'plug-a'"):
        registry = LossRegistry(autoload=True)
    with pytest.raises(LossNameCollisionError) as info:
        registry.get("shared")
    assert "'plug-a'" in str(info.value) and "'plug-b'" in str(info.value)
    assert "shared" not in registry.names() and set(registry.refused()) == {"shared"}
    # every other loss, built-in or third-party, keeps working
    inputs = random_batch(4, 5, seed=4)
    assert registry.get("my_gmpo")(inputs).loss.item() == pytest.approx(registry.get("gmpo")(inputs).loss.item())
    assert set(BUILTIN_LOSS_NAMES) <= set(registry.names())


def test_shadowing_a_builtin_refuses_that_name_naming_both(site):
    site.add("plug-a", "plug_a", PLUGIN_SOURCE.format(name="gmpo"))
    with pytest.warns(PluginLoadWarning):
        registry = LossRegistry(autoload=True)
    message = r"'gmpo' is registered by both distribution 'gmpo-plugins' and distribution 'plug-a'"
    with pytest.raises(LossNameCollisionError, match=message):
        registry.get("gmpo")
    assert registry.get("gspo").provider == "gmpo-plugins"
    assert "gmpo" not in registry.names() and set(BUILTIN_LOSS_NAMES) - {"gmpo"} <= set(registry.names())


def test_builtin_names_module_lists_the_registrys_builtins():
    builtins = LossRegistry(autoload=False)
    assert sorted(BUILTIN_LOSS_NAMES) == builtins.names()
    assert all(spec.provider == "gmpo-plugins" for spec in builtins.specs())


def test_plugin_that_fails_to_import_warns_and_the_rest_works(site):
    site.add("plug-broken", "plug_broken", "raise ImportError('missing dependency xyz')\n")
    site.add("plug-a", "plug_a", PLUGIN_SOURCE.format(name="my_gmpo"))
    with pytest.warns(PluginLoadWarning) as record:
        registry = LossRegistry(autoload=True)
    message = str(record[0].message)
    assert "'plug-broken'" in message and "missing dependency xyz" in message
    assert {"gmpo", "my_gmpo"} <= set(registry.names())


def test_plugin_whose_hook_raises_warns_and_is_skipped(site):
    site.add(
        "plug-raises",
        "plug_raises",
        """
        from gmpo_plugins import hookimpl

        @hookimpl
        def gmpo_plugins_losses():
            raise RuntimeError("boom")
    """,
    )
    with pytest.warns(PluginLoadWarning, match=r"plug-raises.*boom"):
        registry = LossRegistry(autoload=True)
    assert "gmpo" in registry.names()


def test_plugin_returning_non_specs_warns(site):
    site.add(
        "plug-a",
        "plug_a",
        """
        from gmpo_plugins import hookimpl

        @hookimpl
        def gmpo_plugins_losses():
            return ["not a spec"]
    """,
    )
    with pytest.warns(PluginLoadWarning, match="expected LossSpec"):
        LossRegistry(autoload=True)


def test_disable_autoload_loads_builtins_only(site, monkeypatch):
    site.add("plug-a", "plug_a", PLUGIN_SOURCE.format(name="my_gmpo"))
    monkeypatch.setenv("GMPO_PLUGINS_DISABLE_AUTOLOAD", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        names = set(LossRegistry().names())
    assert names == BUILTINS
    monkeypatch.setenv("GMPO_PLUGINS_DISABLE_AUTOLOAD", "0")
    assert {"my_gmpo", "example_reinforce"} <= set(LossRegistry().names())


def test_loss_call_results_do_not_depend_on_registry_instance(site):
    inputs = random_batch(3, 4, seed=9)
    a = LossRegistry(autoload=False).get("grpo")(inputs).loss
    b = get_loss("grpo")(inputs).loss
    assert torch.equal(a, b)
