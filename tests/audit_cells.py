"""The live audit verdicts of a framework environment against the cells committed in
docs/audit/<session>.json, shared by each framework's test directory.

Every committed cell must keep its verdict. A registry loss the committed cells do not hold
yet is accepted only while its live verdict is "not shipped" in that framework (a new loss
the framework does not implement changes nothing there); any other verdict for it is a
change to commit."""

from __future__ import annotations

import json
from pathlib import Path

from gmpo_plugins.compare.audit.callers import FRAMEWORKS
from gmpo_plugins.compare.audit.report import registry_losses
from gmpo_plugins.compare.audit.verdict import audit_cell

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = (
    "if the change is upstream's (a fix or a regression) and intended, regenerate the cells with "
    "`python3 -m nox -r -s {session}` (it writes docs/audit/{cells}.json), rebuild the page with "
    "`gmpo-plugins audit --merge docs/audit/*.json --markdown docs/audit.md`, and commit both"
)
NEW_LOSSES = (
    "a registry loss without a committed cell is accepted only while the framework does not ship it "
    "(live verdict 'not shipped'); the ones above have a live verdict, so their cells must be committed"
)
COMPARED = ("verdict", "conventions", "verified", "overflow_probe")


def summary(cell: dict) -> dict:
    """What must not change: the verdict, its conventions, the float32 overflow probe, and the
    split factor to 2 decimals."""
    factor = cell.get("split_factor")
    return {**{key: cell.get(key) for key in COMPARED}, "split_factor": None if factor is None else round(factor, 2)}


def changed_cells(committed: dict) -> list[str]:
    """One line per (loss, framework) whose live verdict differs from the ``committed`` document
    (docs/audit/<session>.json, loaded); a loss without a committed cell only where it is shipped."""
    frameworks = list(committed["frameworks"])
    by_key = {(cell["loss"], cell["framework"]): summary(cell) for cell in committed["cells"]}
    changes = []
    for name in frameworks:
        caller = FRAMEWORKS[name]
        module = caller.load()
        for loss in registry_losses():
            live = summary(audit_cell(caller, loss, module).as_dict())
            before = by_key.pop((loss, name), None)
            if before is None and live["verdict"] == "not shipped":
                continue
            if live != before:
                changes.append(f"{loss} / {name}: committed {before}, now {live}")
    changes += [f"{loss} / {name}: committed {before}, no longer audited" for (loss, name), before in by_key.items()]
    return changes


def assert_cells_unchanged(session: str, cells: str | None = None) -> None:
    """AssertionError listing every changed cell and how to regenerate them; ``cells`` names the
    file docs/audit/<cells>.json the nox ``session`` writes (default: the session's name)."""
    cells = session if cells is None else cells
    changes = changed_cells(json.loads((ROOT / "docs" / "audit" / f"{cells}.json").read_text()))
    assert not changes, (
        "the audit verdicts changed:\n"
        + "\n".join(changes)
        + "\n"
        + NEW_LOSSES
        + ";\n"
        + REGENERATE.format(session=session, cells=cells)
    )


def assert_corrections_identical(framework: str, session: str, cells: str | None = None) -> None:
    """The framework's own rollout correction against the registry's options (``audit.corrections``):
    every row it has a setting for is identical and acts on 5% to 95% of the valid tokens (so that
    it holds something), the others are "not shipped", and the verdicts are those committed in
    docs/audit/<cells>.json."""
    from gmpo_plugins.compare.audit.corrections import CORRECTION_ROWS, CORRECTION_TRANSLATIONS, run_corrections

    live = run_corrections([FRAMEWORKS[framework]])
    assert [cell.row for cell in live] == list(CORRECTION_ROWS)
    translated = CORRECTION_TRANSLATIONS[framework]
    for cell in live:
        if cell.row in translated:
            assert cell.verdict == "identical", cell
            assert cell.acted is not None and 0.05 < cell.acted < 0.95, cell
        else:
            assert cell.verdict == "not shipped", cell
    cells = session if cells is None else cells
    committed = json.loads((ROOT / "docs" / "audit" / f"{cells}.json").read_text())["corrections"]
    assert {cell["row"]: cell["verdict"] for cell in committed} == {cell.row: cell.verdict for cell in live}, (
        REGENERATE.format(session=session, cells=cells)
    )
