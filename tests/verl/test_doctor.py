"""``gmpo-plugins doctor`` with verl installed: verl's own registry, after ``import verl``,
resolves every registry loss (the example plugin's included) to this package's function."""

from __future__ import annotations

import json

from gmpo_plugins.cli import main
from gmpo_plugins.core.registry import list_losses


def test_doctor_sees_every_loss_in_verl(capsys):
    assert main(["doctor", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (verl,) = [check for check in result["frameworks"] if check["framework"] == "verl"]
    assert verl["ok"] is True and verl["version"].startswith("0.9.")
    assert verl["detail"].startswith(f"get_policy_loss_fn resolves {len(list_losses())} losses after `import verl`")
