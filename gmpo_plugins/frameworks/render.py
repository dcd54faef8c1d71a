"""Launches as text: one block per framework (``--dry-run``), and as files in a folder (``--out``).

A block shows the commands that prepare inputs, the command itself (one argument per line,
shell-quoted, so it can be copied), the files the command reads, and the differences the
spec cannot remove. ``write_launch`` writes the same into ``DIR/<framework>/``: the files,
and ``launch.sh`` with the preparation and the command.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from gmpo_plugins.frameworks.launch import Launch

INDENT = "    "


def shell_lines(argv: Sequence[str]) -> str:
    """``argv`` quoted for a POSIX shell: the program on the first line, then one override or
    flag (with its values) per continued line."""
    words = [shlex.quote(arg) for arg in argv]
    first = next((i for i, arg in enumerate(argv) if arg.startswith("--") or "=" in arg), len(argv))
    lines = [" ".join(words[:first])]
    for word in words[first:]:
        after_flag = len(lines) > 1 and lines[-1].startswith(INDENT + "--")
        if after_flag and not word.startswith("--"):
            lines[-1] += " " + word  # a flag's values stay on its line: "--flag v1 v2"
        else:
            lines.append(INDENT + word)
    return " \\\n".join(lines)


def block(launch: Launch) -> str:
    """The dry-run text of one framework (module docstring)."""
    parts = [f"== {launch.framework} =="]
    if launch.env:
        parts.append("environment:\n" + "\n".join(f"{INDENT}{key}={value}" for key, value in launch.env.items()))
    if launch.prepare:
        parts.append("prepare:\n" + "\n".join(INDENT + " ".join(map(shlex.quote, argv)) for argv in launch.prepare))
    parts.append("command:\n" + INDENT + shell_lines(launch.argv).replace("\n", "\n" + INDENT))
    for name, text in launch.files.items():
        body = "\n".join(f"{INDENT}| {line}".rstrip() for line in text.rstrip("\n").splitlines())
        parts.append(f"file {name}:\n{body}")
    if launch.differences:
        width = max(len(d.topic) for d in launch.differences)
        parts.append(
            "differences the spec cannot remove:\n"
            + "\n".join(f"{INDENT}{d.topic:<{width}}  {d.behaviour}" for d in launch.differences)
        )
    return "\n".join(parts)


def write_launch(launch: Launch, folder: Path) -> None:
    """The launch's files and ``launch.sh`` in ``folder`` (created; must not exist yet)."""
    folder.mkdir(parents=True)
    for name, text in launch.files.items():
        (folder / name).write_text(text)
    env = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in launch.env.items())
    prepare = "".join(" ".join(map(shlex.quote, argv)) + "\n" for argv in launch.prepare)
    script = f"#!/usr/bin/env bash\n# {launch.framework}: written by gmpo-plugins frameworks\nset -euo pipefail\n"
    launch_sh = folder / "launch.sh"
    launch_sh.write_text(script + env + prepare + shell_lines(launch.argv) + "\n")
    launch_sh.chmod(0o755)
