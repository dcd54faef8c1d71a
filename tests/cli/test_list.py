"""``gmpo-plugins list``: table and JSON, through the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gmpo_plugins.cli import main

from ..registry_names import builtin_losses

BUILTINS = set(builtin_losses())


def test_json_lists_every_loss_with_provider_and_defaults(capsys):
    assert main(["list", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert BUILTINS <= set(rows)
    assert rows["gmpo"]["provider"] == "gmpo-plugins"
    assert rows["gmpo"]["defaults"]["eps_low"] == 0.4
    assert rows["gmpo"]["clip_space"] == "log"
    assert rows["grpo"]["defaults"]["reduction"] == "seq-mean-token-mean"
    assert rows["example_reinforce"]["provider"] == "gmpo-example-plugin"


def test_console_script_prints_a_table():
    beside = Path(sys.executable).with_name("gmpo-plugins")  # the script of this environment
    exe = str(beside) if beside.exists() else shutil.which("gmpo-plugins")
    assert exe, "the gmpo-plugins console script is not installed"
    result = subprocess.run(
        [exe, "list"], capture_output=True, text=True, check=True, env={"COLUMNS": "200", "PATH": ""}
    )
    for name in BUILTINS:
        assert name in result.stdout
    assert "eps_low=0.4" in result.stdout and "gmpo-plugins" in result.stdout


def test_unknown_command_exits_2():
    with pytest.raises(SystemExit) as info:
        main(["nope"])
    assert info.value.code == 2


def test_colliding_plugins_give_one_line_and_exit_1(monkeypatch, capsys):
    from gmpo_plugins.core import registry

    def collide():
        raise registry.LossNameCollisionError("loss 'x' is registered by both distribution 'a' and distribution 'b'")

    monkeypatch.setattr(registry, "default_registry", collide)
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "gmpo-plugins list: error: loss 'x' is registered by both distribution 'a' and distribution 'b'"
    )
