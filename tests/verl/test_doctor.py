"""``gmpo-plugins doctor`` with verl installed: verl's own registry, after ``import verl``,
resolves every registry loss (the example plugin's included) to this package's function, and
the line names what loaded the adapter (verl 0.8: VERL_USE_EXTERNAL_MODULES, set by the verl08
session)."""

from __future__ import annotations

import json

from gmpo_plugins.adapters.upstream import installed_version
from gmpo_plugins.cli import main
from gmpo_plugins.core.registry import list_losses

from .releases import RELEASE


def test_doctor_sees_every_loss_in_verl(capsys):
    assert main(["doctor", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (verl,) = [check for check in result["frameworks"] if check["framework"] == "verl"]
    assert verl["ok"] is True and verl["in_tested_range"] is True and verl["version"] == installed_version("verl")
    resolves = f"get_policy_loss_fn resolves {len(list_losses())} losses after `import verl`"
    if RELEASE.entry_points:
        assert verl["detail"].startswith(f"{resolves} (verl.plugins entry point)")
    else:
        loaded_by = "VERL_USE_EXTERNAL_MODULES=gmpo_plugins.adapters.verl"
        note = "verl 0.8 does not import the verl.plugins entry points"
        assert verl["detail"].startswith(f"{resolves} ({loaded_by}; {note})")
