"""Usage errors of ``gmpo-plugins``: the error every command raises for a bad command-line
value, and the argument parser that turns argparse's own errors into it."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import NoReturn


class UsageError(Exception):
    """A bad command-line value: ``cli.main`` reports it in one line and exits with status 2.

    ``prog`` is the command it belongs to (e.g. ``"gmpo-plugins bench"``) when the parser
    raised it; a command's own checks leave it None (``cli.main`` knows the command).
    """

    def __init__(self, message: str, prog: str | None = None) -> None:
        super().__init__(message)
        self.prog = prog


_MISSING_VALUE = re.compile(r"argument (--[\w-]+)(?:/[^:]*)?: expected one argument")


class OneLineArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors raise ``UsageError`` (one line, exit 2
    in ``cli.main``) instead of printing the usage block; sub-command parsers made by
    ``add_subparsers().add_parser`` are of this class too.

    "expected one argument" for an option followed by a value that starts with ``-``
    (``--shapes -1x8``: argparse takes such a value for an option) says how to pass it.
    """

    _argv: Sequence[str] = ()

    def parse_known_args(  # type: ignore[override]  # the same call, typed loosely as argparse is
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's, remembering the arguments for ``error``'s hint."""
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """Raise ``UsageError`` with argparse's message on one line."""
        message = " ".join(message.split())
        missing = _MISSING_VALUE.fullmatch(message)
        if missing and self._value_looks_like_an_option(missing.group(1)):
            message += f" (a value that starts with '-' is written {missing.group(1)}=VALUE)"
        raise UsageError(message, prog=self.prog)

    def _value_looks_like_an_option(self, option: str) -> bool:
        argv = list(self._argv)
        return any(argv[i] == option and argv[i + 1].startswith("-") for i in range(len(argv) - 1))
