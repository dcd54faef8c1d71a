"""The report folder of ``gmpo-plugins compare``: what it writes there, the overwrite rule,
and the marker of an unfinished run.

Rule: ``compare`` refuses (usage error, exit 2) when the folder already holds any of the
entries it writes (``REPORT_ENTRIES``), so a previous report is never silently replaced;
``--force`` removes exactly those entries first. Other files in the folder are never touched.

While a run is under way the folder holds ``INCOMPLETE`` (what ran, and that the run has
not finished); it is removed only after report.md is written. A folder with ``INCOMPLETE``
is the trace of an interrupted or failed run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

INCOMPLETE = "INCOMPLETE"
REPORT_ENTRIES = (
    "report.md",
    "metrics.jsonl",
    "reward.png",
    "heldout.png",
    "ratio_range.png",
    "entropy_kl.png",
    "model-init",
    "logs",
    INCOMPLETE,
)


class OutDirError(Exception):
    """The report folder cannot be used as asked (message names ``--out``)."""


def existing_entries(path: Path) -> list[str]:
    """The entries of ``REPORT_ENTRIES`` already present in ``path``."""
    return [name for name in REPORT_ENTRIES if (path / name).exists() or (path / name).is_symlink()]


def prepare(path: Path, *, force: bool) -> None:
    """Make ``path`` ready for a new report: refuse a previous one unless ``force``, then prove
    a file can be written there. Raises OutDirError."""
    if path.exists() and not path.is_dir():
        raise OutDirError(f"--out: {str(path)!r} exists and is not a folder")
    found = existing_entries(path) if path.is_dir() else []
    if found and not force:
        raise OutDirError(
            f"--out: {str(path)!r} already holds a report ({', '.join(found)}); "
            "choose another folder, or pass --force to replace those entries"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
        for name in found:
            entry = path / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise OutDirError(f"--out: cannot write to {str(path)!r}: {exc.strerror or exc}") from None


def mark_incomplete(path: Path, command: str) -> None:
    """Write the ``INCOMPLETE`` marker (removed by ``mark_complete``)."""
    (path / INCOMPLETE).write_text(
        "This report folder is incomplete: the run below did not finish (interrupted or failed).\n"
        "metrics.jsonl holds the steps that completed; report.md and the plots are written only at the end.\n"
        f"Command: {command}\n"
    )


def mark_complete(path: Path) -> None:
    """Remove the ``INCOMPLETE`` marker after the report was written."""
    (path / INCOMPLETE).unlink(missing_ok=True)
