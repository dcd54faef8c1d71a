"""Names in SkyRL's PolicyLossRegistry: ours where free, the prefix where SkyRL has a
built-in of that name, never a SkyRL built-in replaced, registering twice harmless."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gmpo_plugins.adapters.skyrl import PREFIX, is_ours, register_losses
from gmpo_plugins.core.registry import list_losses


def test_every_loss_is_registered_and_gspo_only_prefixed(registered):
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    by_loss = {name.loss: name for name in registered}
    assert set(by_loss) == {spec.name for spec in list_losses()}
    for spec in list_losses():
        fn = PolicyLossRegistry.get(PREFIX + spec.name)
        assert is_ours(fn) and fn.loss == spec.name
    gspo = by_loss["gspo"]
    assert gspo.bare is None and "SkyRL's built-in" in gspo.taken_by and "gspo_policy_loss" in gspo.taken_by
    assert not is_ours(PolicyLossRegistry.get("gspo"))
    assert by_loss["gmpo"].bare == "gmpo" and PolicyLossRegistry.get("gmpo").loss == "gmpo"
    for builtin in ("regular", "dual_clip", "cispo", "sapo", "cross_entropy"):
        assert not is_ours(PolicyLossRegistry.get(builtin))


def test_registering_twice_is_harmless(registered):
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    before = {name: PolicyLossRegistry.get(name) for name in PolicyLossRegistry.list_available()}
    assert register_losses() == registered
    after = {name: PolicyLossRegistry.get(name) for name in PolicyLossRegistry.list_available()}
    assert after == before


def test_names_table_from_the_command_line():
    out = subprocess.run(
        [sys.executable, "-m", "gmpo_plugins.adapters.skyrl", "--names"], capture_output=True, text=True, check=True
    ).stdout
    assert "gmpo              gmpo  or  gmpo_plugins.gmpo" in out
    assert "gspo              gmpo_plugins.gspo  ('gspo' alone is SkyRL's built-in" in out


def test_entry_point_registers_then_runs_skyrl_main_without_the_override(monkeypatch):
    """``trainer.override_entrypoint=gmpo_plugins.adapters.skyrl.entrypoint`` makes SkyRL's
    main_base call our ``main()``, which must hand SkyRL's strict config parser the other
    overrides only. Stand-in: SkyRL's main_base module itself, which imports SkyRL's whole
    trainer stack (torchdata, the inference clients) and starts a GPU run; only its
    ``main()`` is replaced, to record what it would parse."""
    import types

    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    from gmpo_plugins.adapters.skyrl import entrypoint

    seen = {}
    stand_in = types.ModuleType("skyrl.train.entrypoints.main_base")
    stand_in.main = lambda: seen.update(argv=list(sys.argv), losses=PolicyLossRegistry.list_available())
    monkeypatch.setitem(sys.modules, "skyrl.train.entrypoints.main_base", stand_in)
    monkeypatch.setattr(sys, "argv", ["main_base.py"])
    overrides = ["trainer.override_entrypoint=gmpo_plugins.adapters.skyrl.entrypoint", *VALID]
    entrypoint.main(overrides)
    assert seen["argv"] == ["main_base.py", *VALID]
    assert "gmpo" in seen["losses"] and "gmpo_plugins.gspo" in seen["losses"]


# a configuration SkyRL's validate_cfg and gmpo accept (SkyRL's default logger needs WANDB_API_KEY)
VALID = [
    "trainer.logger=console",
    "trainer.algorithm.policy_loss_type=gmpo",
    "trainer.algorithm.loss_reduction=sequence_mean",
]


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("trainer.algorithm.policy_loss_type=gmpo_typo", "invalid policy_loss_type: gmpo_typo"),
        ("trainer.algorithm.loss_reduction=token_mean", "trainer.algorithm.loss_reduction='token_mean'"),
        ("trainer.algorithm.eps_clip_low=0", "trainer.algorithm.eps_clip_low"),
    ],
)
def test_entry_point_refuses_a_bad_configuration_before_skyrl_starts(monkeypatch, capsys, override, named):
    """The adapter's entry point checks the config (SkyRL's validate_cfg, then the loss's
    translation) before SkyRL's main_base starts Ray: exit status 2, one line naming the setting.
    Stand-in: main_base, as above; it must not be reached."""
    import types

    from gmpo_plugins.adapters.skyrl import entrypoint

    stand_in = types.ModuleType("skyrl.train.entrypoints.main_base")
    stand_in.main = lambda: pytest.fail("SkyRL's main ran with a configuration the loss refuses")
    monkeypatch.setitem(sys.modules, "skyrl.train.entrypoints.main_base", stand_in)
    with pytest.raises(SystemExit) as exit_info:
        entrypoint.main([*VALID, override])
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("python -m gmpo_plugins.adapters.skyrl: invalid configuration: ") and named in line, line


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="skyrl imports on Python >= 3.12")
def test_skyrl_that_cannot_be_imported_is_an_import_error_saying_why():
    """Without the test shim, skyrl (0.3 and 0.4) fails to import on Python 3.11 with a pydantic error;
    register_losses turns it into an ImportError (which parity reports as a skipped target)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    code = "from gmpo_plugins.adapters.skyrl import register_losses; register_losses()"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode != 0
    assert "ImportError: gmpo_plugins: SkyRL cannot be imported (PydanticUserError" in result.stderr
    assert "skyrl 0.3 and 0.4 import only on Python >= 3.12" in result.stderr
