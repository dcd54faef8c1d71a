"""``gmpo-plugins list``: the registered losses as a table, JSON with ``--json``, or the
Markdown table of docs/losses.md with ``--markdown``; ``--corrections`` prints the rollout
correction options every loss accepts (``core.correction``) and ``--terms`` the loss terms'
options (``core.terms``), each as docs/losses.md's table; ``--sources`` where every default of the
built-in losses and of the shared options comes from (``LossSpec.sources``), as docs/losses.md's
table."""

from __future__ import annotations

import argparse
import json

from gmpo_plugins.core.correction import CORRECTION_DEFAULTS, CORRECTION_OPTIONS, CORRECTION_SOURCES
from gmpo_plugins.core.per_token import COMMON_DEFAULTS, COMMON_SOURCES
from gmpo_plugins.core.registry import list_losses
from gmpo_plugins.core.terms import TERM_DEFAULTS, TERM_OPTIONS, TERM_SOURCES


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("list", help="list the registered losses")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON instead of a table")
    output.add_argument(
        "--markdown", action="store_true", help="print the Markdown table of the built-in losses (docs/losses.md)"
    )
    output.add_argument(
        "--corrections",
        action="store_true",
        help="print the Markdown table of the rollout correction options every loss accepts (docs/losses.md)",
    )
    output.add_argument(
        "--terms",
        action="store_true",
        help="print the Markdown table of the loss terms' options every loss accepts (docs/losses.md)",
    )
    output.add_argument(
        "--sources",
        action="store_true",
        help="print the Markdown table of where each default of the built-in losses and shared options comes from "
        "(docs/losses.md)",
    )
    parser.set_defaults(run=run)


def loss_rows() -> list[dict]:
    return [
        {
            "name": spec.name,
            "provider": spec.provider,
            "description": spec.description,
            "clip_space": spec.clip_space,
            "sequence_level": spec.sequence_level,
            "reductions": list(spec.reductions),
            "impls": list(spec.impls),
            "split_invariant": spec.split_invariant,
            "formula": spec.formula,
            "native": list(spec.native),
            "defaults": dict(spec.defaults),
            "correction": dict(spec.correction),
            "sources": dict(spec.sources),
        }
        for spec in list_losses()
    ]


def run(args: argparse.Namespace) -> int:
    if args.corrections:
        print(corrections_table())
        return 0
    if args.terms:
        print(terms_table())
        return 0
    rows = loss_rows()
    if args.sources:
        print(sources_table(rows))
        return 0
    if args.markdown:
        print(markdown_table(rows))
        return 0
    if args.json:
        print(json.dumps(rows, indent=2, default=repr))  # a plugin's default may not be JSON
        return 0
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:  # rich is an optional extra; plain columns without it
        for row in rows:
            print(f"{row['name']:<16} {row['provider']:<16} {row['description']}")
        print(CORRECTION_LINE)
        print(TERMS_LINE)
        return 0
    table = Table(title="gmpo-plugins losses", show_lines=True)
    table.add_column("loss (provider)", no_wrap=True)
    table.add_column("description, defaults, reductions, impls", overflow="fold", min_width=_longest_word(rows))
    for row in rows:
        name = Text(f"{row['name']}\n") + Text(row["provider"], style="dim")  # Text: no markup in plugin strings
        table.add_row(name, Text("\n".join(_details(row))))
    Console().print(table)
    Console().print(Text(CORRECTION_LINE))
    Console().print(Text(TERMS_LINE))
    return 0


def _details(row: dict) -> list[str]:
    """The lines of a loss's second cell: description, then its defaults, reductions and
    impls as ``key=value`` words separated by ", " (so that a narrow terminal wraps between
    them, never inside one)."""
    lines = [row["description"], ", ".join(f"{key}={value}" for key, value in row["defaults"].items())]
    lines += [f"{key}: {', '.join(row[key])}" for key in ("reductions", "impls") if row[key]]
    if not row["split_invariant"]:
        lines.append("NOT split-invariant: depends on the micro-batch it is given")
    return lines


SHARED_HPARAMS = ("kl_beta", "kl_estimator", "kl_clamp", "log_ratio_bound", "reduction", "rollout_is_aggregation")
"""Hyper-parameters the table leaves out of its column (every built-in loss takes the KL and
guard ones; the reduction has its own column)."""


def markdown_table(rows: list[dict]) -> str:
    """The losses of this distribution as one Markdown table: formula, own hyper-parameters with
    their defaults, the frameworks that ship the loss natively, reductions, split invariance."""
    lines = [
        "| loss | formula | hyper-parameters (defaults) | native in | reductions (default) | split-invariant |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        if row["provider"] != "gmpo-plugins":
            continue
        hparams = ", ".join(f"`{k}={v}`" for k, v in row["defaults"].items() if k not in SHARED_HPARAMS)
        default = row["defaults"].get("reduction")
        reductions = ", ".join(f"**{r}**" if r == default else r for r in row["reductions"]) or "per sequence"
        cells = (
            f"`{row['name']}`",
            row["formula"].replace("|", "\\|"),
            hparams or "-",
            ", ".join(row["native"]) or "-",
            reductions,
            "yes" if row["split_invariant"] else "no",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


CORRECTION_LINE = (
    "Every loss also takes the rollout correction options (gmpo-plugins list --corrections): "
    + ", ".join(CORRECTION_DEFAULTS)
)


def corrections_table() -> str:
    """The rollout correction options as one Markdown table: option, default, meaning."""
    lines = ["| option | default | values and meaning |", "|---|---|---|"]
    for name, default in CORRECTION_DEFAULTS.items():
        lines.append(f"| `{name}` | `{default}` | {CORRECTION_OPTIONS[name]} |")
    return "\n".join(lines)


TERMS_LINE = "Every loss also takes the loss terms' options (gmpo-plugins list --terms): " + ", ".join(TERM_DEFAULTS)


def terms_table() -> str:
    """The loss terms' options as one Markdown table: option, default, meaning."""
    lines = ["| option | default | values and meaning |", "|---|---|---|"]
    for name, default in TERM_DEFAULTS.items():
        lines.append(f"| `{name}` | `{default}` | {TERM_OPTIONS[name]} |")
    return "\n".join(lines)


SHARED_SOURCES = (
    ("the KL term and the guard (every built-in loss)", COMMON_DEFAULTS, COMMON_SOURCES),
    ("rollout correction (every loss)", CORRECTION_DEFAULTS, CORRECTION_SOURCES),
    ("loss terms (every loss)", TERM_DEFAULTS, TERM_SOURCES),
)
"""The shared hyper-parameters, each set with its defaults and sources."""


def sources_table(rows: list[dict]) -> str:
    """Where each default comes from, as one Markdown table: every hyper-parameter of each loss of
    this distribution (its defaults and its own correction defaults) whose default or source is not
    the shared one, then the shared sets (``SHARED_SOURCES``). Plugins from other distributions are
    left out: they may name no source."""
    lines = ["| loss | hyper-parameter | default | source |", "|---|---|---|---|"]
    for row in rows:
        if row["provider"] != "gmpo-plugins":
            continue
        for name, default in {**row["defaults"], **row["correction"]}.items():
            source = row["sources"].get(name, "")
            if name in COMMON_SOURCES and (default, source) == (COMMON_DEFAULTS[name], COMMON_SOURCES[name]):
                continue
            lines.append(f"| `{row['name']}` | `{name}` | `{default}` | {source} |")
    for label, defaults, sources in SHARED_SOURCES:
        lines += [f"| {label} | `{name}` | `{default}` | {sources[name]} |" for name, default in defaults.items()]
    return "\n".join(lines)


def _longest_word(rows: list[dict]) -> int:
    """The width of the longest word of the second column: it wraps at spaces only."""
    return max((len(word) for row in rows for line in _details(row) for word in line.split()), default=1)
