"""Every usage error of every sub-command: exactly one line on stderr, naming the argument,
and exit status 2 (argparse's own errors included: no usage block)."""

from __future__ import annotations

import argparse

import pytest

from gmpo_plugins.cli import main
from gmpo_plugins.cli.main import build_parser


def subcommands() -> list[str]:
    """The sub-commands ``cli.main`` registers."""
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


# the positional arguments a sub-command requires (argparse reports a missing one first)
REQUIRED = {"frameworks": ("examples/frameworks/tiny.toml",)}

# (argv, what the one line must name)
BAD_INVOCATIONS = [
    ([], "COMMAND"),
    (["nope"], "'nope'"),
    (["list", "--json=yes"], "--json"),
    (["list", "extra"], "extra"),
    (["bench", "--losses", ""], "--losses"),
    (["bench", "--losses", " , "], "--losses"),
    (["bench", "--losses", "gmpp"], "--losses"),
    (["bench", "--shapes", "-1x8"], "--shapes=VALUE"),  # argparse takes -1x8 for an option
    (["bench", "--shapes=-1x8"], "--shapes"),
    (["bench", "--shapes"], "--shapes"),
    (["bench", "--dtypes", "fp8"], "--dtypes"),
    (["bench", "--repeats", "0"], "--repeats"),
    (["bench", "--threads", "x"], "--threads"),
    (["bench", "--device", "tpu"], "--device"),
    (["audit", "--markdown", "audit.md"], "--markdown"),
    (["audit", "--merge", "no-such-cells.json", "--markdown", "audit.md"], "--merge"),
    (["audit", "--merge", "no-such-cells.json"], "--merge"),
    (["audit", "--frameworks", "nosuch"], "--frameworks"),
    (["audit", "--losses", "nosuch"], "--losses"),
    (["parity", "--losses", ""], "--losses"),
    (["parity", "--losses", "nosuch"], "--losses"),
    (["parity", "--tol", "x"], "--tol"),
    (["parity", "--tol", "0"], "--tol"),
    (["parity", "--tol"], "--tol"),
    (["compare", "--task", "nosuch"], "--task"),  # before the check for transformers
    (["compare", "--losses", "nosuch"], "--losses"),
    (["compare", "--losses", ","], "--losses"),
    (["compare", "--steps", "0"], "--steps"),
    (["compare", "--steps", "x"], "--steps"),
    (["compare", "--lr", "2"], "--lr"),
    (["compare", "--eval-every", "0"], "--eval-every"),
    (["compare", "--seeds", "x"], "--seeds"),
    (["compare", "--seeds", "5-2"], "--seeds"),
    (["compare", "--seed", "1", "--seeds", "2"], "--seed"),
    (["doctor", "--json=yes"], "--json"),
    (["doctor", "extra"], "extra"),
    (["frameworks"], "SPEC"),
    (["frameworks", "examples/frameworks/tiny.toml", "--frameworks", "megatron"], "--frameworks"),
    (["frameworks", "examples/frameworks/tiny.toml", "--timeout", "0"], "--timeout"),
    (["frameworks", "examples/frameworks/tiny.toml", "--timeout", "x"], "--timeout"),
    (["frameworks", "no/such/spec.toml", "--dry-run"], "spec.toml"),
    (["frameworks", "examples/frameworks/tiny.toml", "--set", "steps"], "--set"),
    (["compare", "--device", "tpu"], "--device"),
] + [([command, *REQUIRED.get(command, ()), "--no-such-option"], "--no-such-option") for command in subcommands()]


def test_every_subcommand_has_bad_invocations_of_its_own():
    tested = {argv[0] for argv, _ in BAD_INVOCATIONS[2:] if argv[-1] != "--no-such-option"}
    assert tested == set(subcommands()), "add bad invocations of the new sub-command to BAD_INVOCATIONS"


@pytest.mark.parametrize(("argv", "named"), BAD_INVOCATIONS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_usage_error_is_one_line_and_exit_2(argv, named, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    command = f"gmpo-plugins {argv[0]}" if argv and argv[0] in subcommands() else "gmpo-plugins"
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"{command}: error: "), lines[0]
    assert named in lines[0], lines[0]
    assert captured.out == ""


def test_a_value_with_a_dash_is_checked_when_attached(capsys):
    """``--shapes=-1x8`` reaches the option's own check, which names what it expects."""
    assert main(["bench", "--shapes=-1x8"]) == 2
    assert capsys.readouterr().err.strip() == (
        "gmpo-plugins bench: error: --shapes: expected comma-separated BxT with B, T >= 1 (e.g. 64x1024), got '-1x8'"
    )


def test_compare_reports_a_bad_task_before_a_missing_dependency(capsys, monkeypatch):
    """Without transformers (import blocked here) ``--task nosuch`` is still the error."""
    import builtins

    real_import = builtins.__import__

    def no_transformers(name, *args, **kwargs):
        if name == "transformers" or name.startswith("transformers."):
            raise ImportError("blocked", name="transformers")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    assert main(["compare", "--task", "nosuch"]) == 2
    assert capsys.readouterr().err.strip() == (
        "gmpo-plugins compare: error: --task: unknown task 'nosuch'; valid: repeat, reverse"
    )
    assert main(["compare"]) == 2  # good options: then the missing dependency is the error
    assert "compare needs transformers" in capsys.readouterr().err


def test_help_still_prints_and_exits_0(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    assert "--shapes" in capsys.readouterr().out
