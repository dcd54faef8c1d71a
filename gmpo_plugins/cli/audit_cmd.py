"""``gmpo-plugins audit``: each installed framework's own implementation of each registry loss
against the registry (``gmpo_plugins.compare.audit``). ``--json`` writes the cells;
``--merge ... --markdown`` builds the docs page from cells written in several environments."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gmpo_plugins.cli.errors import UsageError


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "audit",
        help="hold each installed framework's own loss implementations against the registry",
        description="Each installed framework's own implementation of each registry loss, called through its own "
        "call site with the registry's setting translated, against the registry on hard batches in float64: one "
        "verdict per (loss, framework).",
    )
    parser.add_argument("--frameworks", default=None, help="comma-separated frameworks (default: every installed one)")
    parser.add_argument("--losses", default=None, help="comma-separated registry losses (default: all built-in)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the cells as JSON to PATH")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, metavar="JSON", help="cells to merge")
    parser.add_argument("--markdown", type=Path, default=None, metavar="PATH", help="with --merge: write the page")
    parser.set_defaults(run=run)


def _names(value: str | None, valid: list[str], option: str) -> list[str] | None:
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in valid]
    if not names or unknown:
        raise UsageError(f"{option}: expected comma-separated names from {', '.join(valid)}, got {value!r}")
    return names


def run(args: argparse.Namespace) -> int:
    from gmpo_plugins.compare.audit import report
    from gmpo_plugins.compare.audit.callers import FRAMEWORKS
    from gmpo_plugins.compare.audit.corrections import run_corrections

    if args.merge is not None:
        if args.markdown is None:
            raise UsageError("--merge: expected --markdown PATH for the page it builds")
        missing = [str(path) for path in args.merge if not path.is_file()]
        if missing:
            raise UsageError(f"--merge: no such file: {', '.join(missing)}")
        try:
            merged = report.merge(args.merge)
        except (ValueError, KeyError) as exc:
            raise UsageError(f"--merge: {exc}") from None
        args.markdown.write_text(report.markdown(merged))
        print(f"wrote {args.markdown} ({len(merged['cells'])} cells)")
        return 0
    if args.markdown is not None:
        raise UsageError("--markdown: only with --merge")
    losses = _names(args.losses, report.registry_losses(), "--losses") or report.registry_losses()
    requested = _names(args.frameworks, list(FRAMEWORKS), "--frameworks")
    installed = [name for name, caller in FRAMEWORKS.items() if caller.installed()]
    if requested is not None:
        absent = [name for name in requested if name not in installed]
        if absent:
            raise UsageError(f"--frameworks: not installed here: {', '.join(absent)}")
    frameworks = requested or installed
    cells = report.run_audit(frameworks, losses)
    corrections = run_corrections([FRAMEWORKS[name] for name in frameworks])
    _print(cells, [name for name in FRAMEWORKS if name not in frameworks])
    for cell in corrections:
        print(f"correction {cell.row} / {cell.framework}: {cell.verdict}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        command = "gmpo-plugins audit" + (f" --frameworks {args.frameworks}" if args.frameworks else "")
        command += (f" --losses {args.losses}" if args.losses else "") + f" --json {args.json}"
        document = report.document(cells, frameworks, command, corrections)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


def _print(cells: list, skipped: list[str]) -> None:
    """The verdict table (losses x frameworks), then one line per cell that is not identical."""
    from gmpo_plugins.compare.audit import report

    dicts = [cell.as_dict() for cell in cells]
    if dicts:
        losses, frameworks, by_key = report.matrix(dicts)
        width = max(len(report.short(cell)) for cell in dicts) + 2
        first = max(len(loss) for loss in losses) + 2
        print(f"{'loss':{first}}" + "".join(f"{name:{width}}" for name in frameworks))
        for loss in losses:
            print(f"{loss:{first}}" + "".join(f"{report.short(by_key[(loss, name)]):{width}}" for name in frameworks))
    else:
        print("no framework the audit calls is installed here")
    for cell in dicts:
        if cell["verdict"] not in ("identical", "not shipped"):
            where = f"{cell['loss']} / {cell['framework']} ({cell['call'] or '-'})"
            print(f"{where}: {report.short(cell)}: {report.cause(cell)}")
    for cell in dicts:
        if cell["overflow_probe"] not in ("", "finite"):
            print(f"{cell['loss']} / {cell['framework']}: float32 overflow probe: {cell['overflow_probe']}")
    for name in skipped:
        print(f"skipped {name}: not installed here")
