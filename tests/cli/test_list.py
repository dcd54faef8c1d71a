"""``gmpo-plugins list``: table and JSON, through the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gmpo_plugins.cli import main
from gmpo_plugins.cli.list_cmd import _details, loss_rows

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
    assert rows["grpo"]["reductions"] == [
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
        "token-sum",
        "seq-mean-token-sum",
    ]
    assert rows["gmpo"]["split_invariant"] is True
    assert {name for name, row in rows.items() if not row["split_invariant"]} == {"clip_cov", "kl_cov"}
    assert rows["grpo"]["impls"] == ["auto", "eager", "torch"]
    assert rows["gmpo"]["reductions"] == [] and rows["gmpo"]["impls"] == ["auto", "eager", "torch", "triton"]
    assert rows["example_reinforce"]["impls"] == []
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
    assert "NOT split-invariant" in result.stdout


@pytest.mark.parametrize("columns", [80, 100])
def test_table_at_80_columns_never_splits_a_word(columns, monkeypatch, capsys):
    """Each description word and each ``key=value`` default stays whole on one line (a
    narrow terminal wraps between them), and no line is wider than the terminal."""
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    words = [word for row in loss_rows() for line in _details(row) for word in line.split()]
    words += [row["name"] for row in loss_rows()] + [row["provider"] for row in loss_rows()]
    split = [word for word in words if not any(word in line for line in lines)]
    assert not split, f"split across lines: {split}"
    assert "reduction=token-mean," in out  # the word the old table cut in two


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
