"""``gmpo-plugins bench --fused-linear``: the paths it measures at one shape (each optional one
where it imports, else named as missing), the ratios against the unfused row, the targets, the
command it prints, and its usage errors."""

from __future__ import annotations

import importlib.util
import json

import pytest

from gmpo_plugins.bench.fused_linear import TARGET_MEMORY, TARGET_TIME
from gmpo_plugins.cli.main import main

OPTIONAL = {"trl": "trl", "verl": "verl", "liger": "liger_kernel"}


def test_every_installed_path_at_one_shape(tmp_path, capsys):
    out = tmp_path / "fused.json"
    argv = ["bench", "--fused-linear", "2048x16", "--fused-tokens", "2x64", "--repeats", "1", "--threads", "1"]
    assert main([*argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {row["path"]: row for row in result["rows"]}
    expected = {"unfused", "fused_linear_loss"} | {
        path for path, module in OPTIONAL.items() if importlib.util.find_spec(module) is not None
    }
    assert set(rows) == expected
    for path, module in OPTIONAL.items():
        assert (path in rows) != any(why.startswith(f"{path}: not importable") for why in result["missing"]), module
    assert rows["unfused"]["x_unfused_time"] == rows["unfused"]["x_unfused_memory"] == 1.0
    assert rows["fused_linear_loss"]["chunk"] == 64  # default_chunk_size(2048, 128) = max(16, min(256, 64))
    # one (64, 2048) float32 chunk, 0.5 MiB, against the unfused (128, 2048) logits and more
    assert rows["fused_linear_loss"]["extra_bytes"] < rows["unfused"]["extra_bytes"] / 1.5
    for row in result["rows"]:
        assert row["tokens"] == 128 and row["cpu_ms"] is not None and row["extra_bytes"] > 0
    targets = [t["target"] for t in result["targets"]]
    assert targets == [
        "V=2048 H=16 N=128: fused_linear_loss extra memory <= 1/8 of unfused",
        f"V=2048 H=16 N=128: fused_linear_loss time <= {TARGET_TIME}x unfused",
    ]
    memory = result["targets"][0]
    assert memory["met"] == (memory["value"] <= TARGET_MEMORY)
    assert {c["path"] for c in result["comparisons"]} == expected - {"unfused", "fused_linear_loss"}
    printed = capsys.readouterr().out
    assert printed.startswith(
        "`gmpo-plugins bench --fused-linear 2048x16 --fused-tokens 2x64 --device cpu --repeats 1 --threads 1`"
    )
    assert "| 2048 | 16 | fused_linear_loss | gmpo | 64 |" in printed


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--fused-linear", "2048"], "--fused-linear"),
        (["--fused-linear", "2048x16", "--fused-chunk", "0"], "--fused-chunk"),
        (["--fused-linear", "2048x16", "--fused-import-path", "/nonexistent/dir"], "--fused-import-path"),
    ],
)
def test_bad_arguments_exit_2(argv, option, capsys):
    assert main(["bench", *argv]) == 2
    assert option in capsys.readouterr().err
