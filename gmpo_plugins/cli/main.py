"""Argument parsing and dispatch for ``gmpo-plugins``.

Usage errors, argparse's own included (``errors.OneLineArgumentParser``), print one line
and exit with status 2 (argparse's convention); a broken plugin set-up (two plugins
claiming one loss name) prints one line and exits with 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gmpo_plugins.cli import audit_cmd, bench_cmd, compare_cmd, doctor_cmd, frameworks_cmd, list_cmd, parity_cmd
from gmpo_plugins.cli.errors import OneLineArgumentParser, UsageError
from gmpo_plugins.core.registry import LossNameCollisionError


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="gmpo-plugins", description="GMPO-family policy losses for LLM RL.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    list_cmd.add_parser(commands)
    doctor_cmd.add_parser(commands)
    bench_cmd.add_parser(commands)
    compare_cmd.add_parser(commands)
    parity_cmd.add_parser(commands)
    audit_cmd.add_parser(commands)
    frameworks_cmd.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # reported with the command they were given to
            raise UsageError(f"unrecognized arguments: {' '.join(unknown)}", prog=f"gmpo-plugins {args.command}")
    except UsageError as exc:  # argparse's own errors, from the parser of the command they concern
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return int(args.run(args) or 0)
    except UsageError as exc:
        print(f"gmpo-plugins {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except LossNameCollisionError as exc:
        print(f"gmpo-plugins {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
