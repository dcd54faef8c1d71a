"""Copy the generated parts of a ``gmpo-plugins compare`` report into the docs.

    python tools/compare_docs.py REPORT_DIR [--docs docs] [--section default]

Writes, between ``<!-- compare:SECTION:begin -->`` and ``<!-- compare:SECTION:end -->`` in
docs/compare.md, the report's command, machine, time and tables (verbatim from report.md),
and copies the report's PNGs to docs/compare-SECTION-<name>.png. Nothing is typed by hand,
so the docs show exactly what the command printed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path


def _find(pattern: str, text: str, flags: int = re.M) -> str:
    match = re.search(pattern, text, flags)
    if match is None:
        raise SystemExit(f"report.md: nothing matches {pattern!r}; is it a gmpo-plugins compare report?")
    return match.group(1)


def generated_block(report_dir: Path, section: str, docs: Path) -> str:
    text = (report_dir / "report.md").read_text()
    command = _find(r"^Command: (.*)$", text)
    machine = _find(r"^Machine: (.*)$", text)
    timing = _find(r"^- time: (.*)$", text)
    lines = [f"Command: {command}", "", f"Machine: {machine}", "", f"Measured time: {timing}", ""]
    for title in re.findall(r"^## (.*)\n\n<!-- table:", text, re.M):
        table = _find(rf"^## {re.escape(title)}\n\n<!-- table:\w+ -->\n(.*?)\n<!-- /table", text, re.M | re.S)
        lines += [f"**{title}**", "", table, ""]
    for png in sorted(report_dir.glob("*.png")):
        target = docs / f"compare-{section}-{png.name}"
        shutil.copyfile(png, target)
        lines += [f"![{png.stem} ({section} run)]({target.name})", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report_dir", type=Path)
    parser.add_argument("--docs", type=Path, default=Path("docs"))
    parser.add_argument("--section", default="default")
    args = parser.parse_args(argv)
    page = args.docs / "compare.md"
    begin, end = f"<!-- compare:{args.section}:begin -->", f"<!-- compare:{args.section}:end -->"
    text = page.read_text()
    if begin not in text or end not in text:
        print(f"{page}: markers {begin} / {end} not found", file=sys.stderr)
        return 2
    block = generated_block(args.report_dir, args.section, args.docs)
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{begin}\n{block}\n{end}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
