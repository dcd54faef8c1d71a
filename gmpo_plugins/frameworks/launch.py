"""What a translator produces for one framework: the exact launch, and what stays different.

A ``Launch`` is a command line (``argv``, with ``{out}`` standing for the framework's own
output folder), the environment variables it needs, the files the command reads that the
runner writes first (reward bridges, a training script) as text, and the commands that
prepare its inputs (a dataset converted to the framework's format), run before it.
``differences`` lists the framework's behaviour that the run spec cannot remove.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

OUT = "{out}"  # placeholder in argv, env and files: the framework's output folder


class UnsupportedSettingError(ValueError):
    """A run-spec setting that a framework cannot express (never dropped silently)."""

    def __init__(self, framework: str, setting: str, why: str) -> None:
        super().__init__(f"{framework} cannot express {setting}: {why}")
        self.framework = framework
        self.setting = setting


@dataclass(frozen=True)
class Difference:
    """One behaviour of a framework that the spec cannot align: ``topic`` (advantages, kl,
    loss aggregation, ...) and what the framework does. ``first_update`` is what of it reaches
    the first RL step, worded the same way for every framework so that two frameworks'
    values can be compared ("" when it does not reach it, or is the same everywhere)."""

    topic: str
    behaviour: str
    first_update: str = ""


@dataclass(frozen=True)
class Launch:
    """One framework's launch (module docstring)."""

    framework: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)  # path under {out} -> text
    prepare: tuple[tuple[str, ...], ...] = ()
    differences: tuple[Difference, ...] = ()

    def command(self) -> str:
        """The shell command line: ``VAR=value ... argv``, quoted."""
        env = [f"{key}={shlex.quote(value)}" for key, value in self.env.items()]
        return " ".join([*env, *(shlex.quote(arg) for arg in self.argv)])

    def with_out(self, out: str) -> Launch:
        """This launch with ``{out}`` replaced by ``out`` everywhere."""

        def fill(text: str) -> str:
            return text.replace(OUT, out)

        return Launch(
            self.framework,
            tuple(fill(arg) for arg in self.argv),
            {key: fill(value) for key, value in self.env.items()},
            {fill(path): fill(text) for path, text in self.files.items()},
            tuple(tuple(fill(arg) for arg in argv) for argv in self.prepare),
            self.differences,
        )
