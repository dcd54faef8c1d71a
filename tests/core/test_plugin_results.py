"""Results of third-party losses are checked at ``LossSpec.__call__`` (so in every adapter
and command): a broken plugin gets an error naming the loss and its distribution, and does
not break ``list``, ``parity`` or ``bench`` for the other losses. Also the small contract
checks of the call: ``inputs`` type, the no-grad warning, the autoload switch spellings."""

from __future__ import annotations

import hashlib
import json
import warnings

import pytest
import torch

from gmpo_plugins import LossInputs, LossResultError, NoGradientWarning, PluginLoadWarning, get_loss
from gmpo_plugins.cli.main import main
from gmpo_plugins.core import registry, spec
from gmpo_plugins.core.registry import LossRegistry

from .batches import random_batch
from .test_registry import BUILTINS, FakeSite

BROKEN_SOURCE = """
import torch
from gmpo_plugins import LossOutput, LossSpec, hookimpl

def non_scalar(inputs, batch):
    return LossOutput(loss=-(inputs.advantages[:, None] * inputs.log_probs).sum(-1))

def bare_tensor(inputs, batch):
    return -(inputs.advantages[:, None] * inputs.log_probs).sum()

def nan_loss(inputs, batch):
    return LossOutput(loss=inputs.log_probs.sum() * float("nan"))

def no_graph(inputs, batch):
    return LossOutput(loss=torch.zeros(()))

@hookimpl
def gmpo_plugins_losses():
    return [LossSpec(name=fn.__name__, fn=fn, description="broken on purpose")
            for fn in (non_scalar, bare_tensor, nan_loss, no_graph)]
"""


@pytest.fixture
def broken(tmp_path, monkeypatch):
    """A real installed distribution ``plug-broken-results`` whose four losses break the contract;
    the process-wide registry (used by the commands) sees it."""
    monkeypatch.delitem(__import__("sys").modules, "plug_broken_results", raising=False)
    FakeSite(tmp_path, monkeypatch).add("plug-broken-results", "plug_broken_results", BROKEN_SOURCE)
    monkeypatch.setattr(registry, "_default", LossRegistry(autoload=True))
    return registry._default


@pytest.mark.parametrize(
    "name, message",
    [
        ("non_scalar", "returned a loss of shape (6,) torch.float64, expected a 0-dim floating-point tensor"),
        ("bare_tensor", "returned Tensor, expected gmpo_plugins.LossOutput"),
        ("nan_loss", "returned a non-finite loss (nan) for finite inputs"),
        ("no_graph", "returned a loss that does not require grad although log_probs does"),
    ],
)
def test_broken_results_raise_naming_loss_and_provider(broken, name, message):
    with pytest.raises(LossResultError) as info:
        broken.get(name)(random_batch())
    text = str(info.value)
    assert f"loss {name!r} (from distribution 'plug-broken-results')" in text and message in text


def test_result_checks_without_values_do_not_need_a_sync(broken):
    # validate=False: the structural checks still run (no tensor is read); a NaN passes unseen
    with pytest.raises(LossResultError, match="0-dim"):
        broken.get("non_scalar")(random_batch(), validate=False)
    assert torch.isnan(broken.get("nan_loss")(random_batch(), validate=False).loss)


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_list_shows_every_loss_with_a_broken_plugin(broken, capsys):
    assert main(["list", "--json"]) == 0
    names = {row["name"] for row in json.loads(capsys.readouterr().out)}
    assert names >= BUILTINS | {"non_scalar", "bare_tensor", "nan_loss", "no_graph"}


def test_parity_reports_broken_losses_and_checks_the_others(broken, capsys):
    pytest.importorskip("rich")
    rc = main(["parity", "--losses", "gmpo,non_scalar,no_graph"])
    captured = capsys.readouterr()
    assert rc == 1 and "Traceback" not in captured.err
    out = " ".join(captured.out.split())
    assert "FAIL core / non_scalar: core raised on near: LossResultError" in out
    assert "FAIL core / no_graph" in out
    assert "FAIL core / gmpo" not in out


def test_bench_reports_broken_losses_and_measures_the_others(broken, tmp_path, capsys):
    path = tmp_path / "bench.json"
    rc = main(
        [
            "bench",
            "--losses",
            "bare_tensor,gmpo",
            "--shapes",
            "2x16",
            "--dtypes",
            "fp32",
            "--repeats",
            "1",
            "--markdown",
            "--json",
            str(path),
        ]
    )
    captured = capsys.readouterr()
    assert rc == 1 and "Traceback" not in captured.err
    assert "loss bare_tensor failed: LossResultError" in captured.err
    result = json.loads(path.read_text())
    assert set(result["failed"]) == {"bare_tensor"}
    assert {row["loss"] for row in result["rows"]} >= {"gmpo"} and "bare_tensor" not in {
        r["loss"] for r in result["rows"]
    }


def test_bench_json_path_is_checked_before_the_benchmark(tmp_path, capsys):
    folder = tmp_path / "report"
    folder.mkdir()
    kept = folder / "keep.txt"
    kept.write_text("user data")
    before = _sha(kept)
    rc = main(["bench", "--losses", "gmpo", "--shapes", "2x16", "--dtypes", "fp32", "--json", str(folder)])
    captured = capsys.readouterr()
    assert rc == 2 and captured.err.strip().endswith("is a directory, expected a file path")
    assert "\nbench: " not in "\n" + captured.err  # no progress line: nothing was measured
    assert _sha(kept) == before and sorted(p.name for p in folder.iterdir()) == ["keep.txt"]
    rc = main(["bench", "--losses", "gmpo", "--json", str(kept / "bench.json")])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
    assert _sha(kept) == before


def test_parity_with_empty_losses_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine.txt"
    mine.write_text("x")
    before = _sha(mine)
    assert main(["parity", "--losses", ""]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "gmpo-plugins parity: error: --losses: expected comma-separated loss names, got ''"
    )
    assert main(["parity", "--losses", " , "]) == 2
    assert _sha(mine) == before and sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_compare_help_lists_frameworks_without_markup(capsys):
    with pytest.raises(SystemExit) as info:
        main(["compare", "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert "``" not in out and ":class:" not in out
    from gmpo_plugins.compare.backends.base import FRAMEWORKS

    assert f"from {', '.join(FRAMEWORKS)}" in " ".join(out.split())


def test_inputs_none_is_a_type_error_naming_inputs():
    with pytest.raises(TypeError, match=r"^inputs: expected gmpo_plugins.LossInputs, got NoneType$"):
        get_loss("gmpo")(None)


def test_no_grad_inputs_warn_once_per_loss(monkeypatch):
    monkeypatch.setattr(spec, "_warned_no_grad", set())
    inputs = random_batch()
    detached = LossInputs(inputs.log_probs.detach(), inputs.old_log_probs, inputs.advantages, inputs.mask)
    with pytest.warns(NoGradientWarning, match="'gmpo' called on log_probs that do not require grad"):
        get_loss("gmpo")(detached)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get_loss("gmpo")(detached)  # once only
        with torch.no_grad():  # evaluation: no warning
            get_loss("grpo")(detached)
        get_loss("grpo")(inputs)


@pytest.mark.parametrize(
    "value, autoload",
    [
        ("1", False),
        ("true", False),
        ("TRUE", False),
        ("yes", False),
        ("on", False),
        ("", True),
        ("0", True),
        ("false", True),
        ("False", True),
        ("no", True),
        ("off", True),
    ],
)
def test_disable_autoload_spellings(value, autoload, monkeypatch):
    monkeypatch.setenv("GMPO_PLUGINS_DISABLE_AUTOLOAD", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert registry.autoload_enabled() is autoload


def test_disable_autoload_unknown_spelling_warns_and_disables(monkeypatch):
    monkeypatch.setenv("GMPO_PLUGINS_DISABLE_AUTOLOAD", "maybe")
    with pytest.warns(PluginLoadWarning, match="'maybe' is not one of"):
        assert registry.autoload_enabled() is False
