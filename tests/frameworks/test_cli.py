"""``gmpo-plugins frameworks SPEC --dry-run``: the blocks printed for every framework (no framework
installed), the example spec, usage errors in one line with exit status 2, and --out."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from gmpo_plugins.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "frameworks" / "tiny.toml"


ALL_FOUR = ["== verl ==", "== openrlhf ==", "== trl ==", "== skyrl =="]


def headers(out: str) -> list[str]:
    """The dry run's block headers, in order."""
    return [line for line in out.splitlines() if line.startswith("== ")]


def usage_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_dry_run_prints_one_block_per_framework(write_spec, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["frameworks", str(write_spec()), "--dry-run"]) == 0
    out = capsys.readouterr().out
    blocks = [line for line in out.splitlines() if line.startswith("== ")]
    assert blocks == ["== verl ==", "== openrlhf ==", "== trl ==", "== skyrl =="]
    assert f"data.train_files={tmp_path}/gmpo-frameworks/verl/train.parquet" in out
    assert "--actor.policy_loss_type gmpo_plugins.gmpo \\" in out  # a flag and its value on one line
    assert "differences the spec cannot remove:" in out
    assert not (tmp_path / "gmpo-frameworks").exists()  # a dry run without --out writes nothing


def test_the_frameworks_option_selects_and_orders(write_spec, capsys):
    assert main(["frameworks", str(write_spec()), "--dry-run", "--frameworks", "trl,verl"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("== ")] == ["== trl ==", "== verl =="]


def test_out_writes_each_launch_and_is_never_overwritten(write_spec, capsys, tmp_path):
    out = tmp_path / "launches"
    assert main(["frameworks", str(write_spec()), "--dry-run", "--out", str(out)]) == 0
    assert sorted(path.name for path in out.iterdir()) == ["openrlhf", "skyrl", "trl", "verl"]
    assert (out / "verl" / "launch.sh").stat().st_mode & 0o111  # executable
    script = (out / "verl" / "launch.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash\n")
    assert "gmpo_plugins.frameworks.datasets verl" in script and f"{out}/verl/train.parquet" in script
    assert (out / "trl" / "train_trl.py").read_text().count(f"'output_dir': '{out}/trl'") == 1
    assert (out / "openrlhf" / "reward.py").exists() and (out / "skyrl" / "skyrl_main.py").exists()
    capsys.readouterr()
    err = usage_error(capsys, ["frameworks", str(write_spec()), "--dry-run", "--out", str(out)])
    assert (
        err
        == f"gmpo-plugins frameworks: error: --out: {out} already exists; choose a new folder (nothing is overwritten)"
    )


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"learning_rat": 1.0}, "learning_rat: unknown key (did you mean 'learning_rate'?)"),
        ({"reward": "reward.py:one_argument"}, "reward: "),
        ({"mini_batch_size": 3, "micro_batch_size": 1}, "mini_batch_size: 3 does not divide"),
        ({"model": "absent"}, "model: "),
    ],
)
def test_a_bad_spec_is_one_line_and_exit_2(write_spec, capsys, values, fragment):
    path = write_spec(**values)
    err = usage_error(capsys, ["frameworks", str(path), "--dry-run"])
    assert err.startswith(f"gmpo-plugins frameworks: error: {path}: {fragment}")


def test_a_refused_setting_takes_its_frameworks_block_in_a_dry_run(write_spec, capsys, tmp_path):
    """SkyRL cannot set AdamW's epsilon: its block says so, the others are printed and written,
    one stderr line names the framework and the setting, exit status 2."""
    spec = write_spec(adam_eps=100.0)
    assert main(["frameworks", str(spec), "--dry-run", "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert headers(out) == ALL_FOUR
    refusal = "skyrl cannot express adam_eps=100.0: trainer.policy.optimizer_config has no epsilon (AdamW's 1e-8)"
    assert f"== skyrl ==\nrefused: {refusal}" in out
    assert err.splitlines() == [f"gmpo-plugins frameworks: error: {refusal} (leave skyrl out with --frameworks)"]
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["openrlhf", "trl", "verl"]
    assert main(["frameworks", str(spec), "--dry-run", "--frameworks", "verl,trl"]) == 0


def test_a_refused_setting_stops_a_run_before_anything_starts(write_spec, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = usage_error(capsys, ["frameworks", str(write_spec(adam_eps=100.0)), "--frameworks", "trl,skyrl"])
    assert err.startswith("gmpo-plugins frameworks: error: skyrl cannot express adam_eps=100.0: ")
    assert not (tmp_path / "gmpo-frameworks").exists()


def test_a_run_refuses_a_loss_hparams_override_in_its_own_environment(write_spec, capsys, tmp_path, monkeypatch):
    # a launch that does not set GMPO_PLUGINS_LOSS_HPARAMS would inherit it: the spec decides instead
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GMPO_PLUGINS_LOSS_HPARAMS", '{"dual_clip": 2.0}')
    err = usage_error(capsys, ["frameworks", str(write_spec(loss="grpo")), "--frameworks", "trl"])
    assert err.startswith("gmpo-plugins frameworks: error: GMPO_PLUGINS_LOSS_HPARAMS is set in this environment; ")
    assert err.endswith(": unset it") and not (tmp_path / "gmpo-frameworks").exists()
    # a dry run translates without it (the launches are the spec's)
    assert main(["frameworks", str(write_spec(loss="grpo")), "--dry-run", "--frameworks", "verl"]) == 0
    assert 'GMPO_PLUGINS_LOSS_HPARAMS={"dual_clip": null}' in capsys.readouterr().out


def test_set_replaces_spec_values_as_toml(write_spec, capsys):
    argv = ["frameworks", str(write_spec()), "--dry-run", "--frameworks", "verl"]
    sets = ["--set", "steps=1", "--set", "advantage_std_norm=false", "--set", "loss_hparams.eps_low=0.3"]
    assert main([*argv, *sets]) == 0
    out = capsys.readouterr().out
    assert "trainer.total_training_steps=1 \\" in out and "algorithm.norm_adv_by_std_in_grpo=false \\" in out
    assert "actor_rollout_ref.actor.clip_ratio_low=0.3 \\" in out


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("steps", "--set steps: expected KEY=VALUE"),
        ("dtype=float32", "--set dtype=float32: 'float32' is not a TOML value (a string needs quotes)"),
    ],
)
def test_a_malformed_set_is_one_line(write_spec, capsys, value, expected):
    err = usage_error(capsys, ["frameworks", str(write_spec()), "--dry-run", "--set", value])
    assert err == f"gmpo-plugins frameworks: error: {expected}"


def test_a_set_value_is_checked_like_the_spec(write_spec, capsys):
    path = write_spec()
    err = usage_error(capsys, ["frameworks", str(path), "--dry-run", "--set", "stepz=1"])
    assert err.startswith(f"gmpo-plugins frameworks: error: {path}: stepz: unknown key (did you mean 'steps'?)")
    err = usage_error(capsys, ["frameworks", str(path), "--dry-run", "--set", "steps=0"])
    assert err == f"gmpo-plugins frameworks: error: {path}: steps: expected an integer >= 1, got 0"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            ["--dry-run", "--frameworks", "verl,megatron"],
            "--frameworks: unknown megatron; valid: verl, openrlhf, trl, skyrl",
        ),
        (["--timeout", "0"], "--timeout: expected seconds > 0, got 0.0"),
        (
            ["--frameworks", "trl,skyrl", "--set", "adam_eps=1e-8"],
            "skyrl: framework 'skyrl' is not installed in this environment and .nox/skyrl does not exist",
        ),
    ],
)
def test_usage_errors(write_spec, capsys, tmp_path, monkeypatch, extra, expected):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_TRL", sys.executable)  # found: the refusal is skyrl's
    monkeypatch.delenv("GMPO_PLUGINS_PYTHON_SKYRL", raising=False)
    err = usage_error(capsys, ["frameworks", str(write_spec()), *extra])
    assert err.startswith(f"gmpo-plugins frameworks: error: {expected}"), err
    assert not (tmp_path / "gmpo-frameworks").exists()  # refused before anything is written


def test_a_run_trains_verl_openrlhf_and_trl_by_default(write_spec, capsys, tmp_path, monkeypatch):
    from gmpo_plugins.frameworks import runner

    asked = []

    def framework_python(framework):
        asked.append(framework)
        if framework == "trl":
            raise runner.RunnerError("trl: stop here")
        return sys.executable

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "framework_python", framework_python)
    assert usage_error(capsys, ["frameworks", str(write_spec())]) == "gmpo-plugins frameworks: error: trl: stop here"
    assert asked == ["verl", "openrlhf", "trl"] and not (tmp_path / "gmpo-frameworks").exists()


def test_a_run_without_the_frameworks_virtualenv_is_refused_before_anything_starts(
    write_spec, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # no .nox/trl here
    monkeypatch.delenv("GMPO_PLUGINS_PYTHON_TRL", raising=False)
    if importlib.util.find_spec("trl") is not None:
        pytest.skip("TRL is installed in this interpreter: it would run here")
    err = usage_error(capsys, ["frameworks", str(write_spec()), "--frameworks", "trl"])
    assert err.startswith("gmpo-plugins frameworks: error: trl: framework 'trl' is not installed")
    assert "python3 -m nox -r -s trl" in err and not (tmp_path / "gmpo-frameworks").exists()


def test_the_example_spec_translates_for_every_framework(capsys, tmp_path):
    """examples/frameworks/tiny.toml with its reward and prompts; the model folder (built by
    build_tiny.py) only has to exist for a dry run, so an empty one stands in."""
    for name in ("tiny.toml", "reward.py", "prompts.jsonl"):
        shutil.copy(EXAMPLE.parent / name, tmp_path / name)
    (tmp_path / "model").mkdir()
    # SkyRL cannot set AdamW's epsilon, which the example raises for a gradient-sized first step
    assert main(["frameworks", str(tmp_path / "tiny.toml"), "--dry-run", "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert headers(out) == ALL_FOUR
    assert "refused: skyrl cannot express adam_eps=100.0" in out and "adam_eps=100.0" in err
    # 2 prompts x 2 rollouts, one mini-batch of 4 responses, 2 epochs: 2 optimiser steps per RL step, 3 steps
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=2 \\" in out and "actor.ppo_epochs=2 \\" in out
    assert "--data.max_samples 6 \\" in out and "'max_steps': 6" in out and "'num_iterations': 2" in out
    assert "--ds.param_dtype fp32 \\" in out and "'adam_epsilon': 100.0" in out


def test_the_docs_show_the_examples_dry_run_as_it_prints(capsys, tmp_path, monkeypatch):
    """docs/frameworks.md shows the example's dry run as printed in a checkout at /tmp/gmpo-plugins:
    the same output here, from a copy of the example at <tmp>/gmpo-plugins, with that folder's path
    written as the docs' (an empty model folder stands in, as above)."""
    checkout = tmp_path / "gmpo-plugins"
    example = checkout / "examples" / "frameworks"
    example.mkdir(parents=True)
    for name in ("tiny.toml", "reward.py", "prompts.jsonl"):
        shutil.copy(EXAMPLE.parent / name, example / name)
    (example / "model").mkdir()
    monkeypatch.chdir(checkout)
    assert main(["frameworks", "examples/frameworks/tiny.toml", "--dry-run"]) == 2
    printed = capsys.readouterr().out.replace(str(checkout), "/tmp/gmpo-plugins")
    docs = (EXAMPLE.parents[2] / "docs" / "frameworks.md").read_text()
    shown = docs.split("```text\n", 1)[1].split("```\n", 1)[0]
    assert printed == shown
