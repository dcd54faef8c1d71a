"""``gmpo-plugins list``: the registered losses as a table, or JSON with ``--json``."""

from __future__ import annotations

import argparse
import json

from gmpo_plugins.core.registry import list_losses


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("list", help="list the registered losses")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=run)


def loss_rows() -> list[dict]:
    return [
        {
            "name": spec.name,
            "provider": spec.provider,
            "description": spec.description,
            "clip_space": spec.clip_space,
            "sequence_level": spec.sequence_level,
            "defaults": dict(spec.defaults),
        }
        for spec in list_losses()
    ]


def run(args: argparse.Namespace) -> int:
    rows = loss_rows()
    if args.json:
        print(json.dumps(rows, indent=2, default=repr))  # a plugin's default may not be JSON
        return 0
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # rich is an optional extra; plain columns without it
        for row in rows:
            print(f"{row['name']:<16} {row['provider']:<16} {row['description']}")
        return 0
    table = Table(title="gmpo-plugins losses")
    for column in ("name", "provider", "description", "defaults"):
        table.add_column(column, overflow="fold")
    for row in rows:
        defaults = ", ".join(f"{key}={value}" for key, value in row["defaults"].items())
        table.add_row(row["name"], row["provider"], row["description"], defaults)
    Console().print(table)
    return 0
