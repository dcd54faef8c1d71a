"""The audit's cells as a table, as JSON, and merged from several environments into the docs page.

JSON (``--json``): ``{"command": ..., "frameworks": {name: {distribution: version}},
"cells": [Cell.as_dict(), ...], "corrections": [CorrectionCell.as_dict(), ...]}``, the cells of
the frameworks installed where it ran.
``merge`` joins such files (one per framework environment); ``markdown`` renders the page.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gmpo_plugins.compare.audit.callers import FRAMEWORKS
from gmpo_plugins.compare.audit.conventions import CONVENTIONS
from gmpo_plugins.compare.audit.corrections import CorrectionCell
from gmpo_plugins.compare.audit.defects import DEFECTS
from gmpo_plugins.compare.audit.translations import VARIANTS
from gmpo_plugins.compare.audit.verdict import TOLERANCE, Cell, audit_cell
from gmpo_plugins.core.registry import DISTRIBUTION, list_losses

COMMAND = "gmpo-plugins audit"
MERGE_COMMAND = "gmpo-plugins audit --merge docs/audit/*.json --markdown docs/audit.md"


def registry_losses() -> list[str]:
    """The built-in losses of the registry (plugins' losses have no framework references), with
    the ``VARIANTS`` rows of those losses."""
    names = {spec.name for spec in list_losses() if spec.provider == DISTRIBUTION}
    return sorted(names | {row for row, (loss_name, _) in VARIANTS.items() if loss_name in names})


def run_audit(frameworks: Sequence[str], losses: Sequence[str]) -> list[Cell]:
    """Every (loss, framework) cell, framework by framework (each imported once)."""
    cells: list[Cell] = []
    for name in frameworks:
        caller = FRAMEWORKS[name]
        module = caller.load()
        cells.extend(audit_cell(caller, loss, module) for loss in losses)
    return cells


def document(
    cells: Iterable[Cell],
    frameworks: Sequence[str],
    command: str = COMMAND,
    corrections: Iterable[CorrectionCell] = (),
) -> dict[str, Any]:
    """The JSON document of ``cells`` and ``corrections`` (module docstring)."""
    return {
        "command": command,
        "frameworks": {name: FRAMEWORKS[name].versions() for name in frameworks},
        "cells": [cell.as_dict() for cell in cells],
        "corrections": [cell.as_dict() for cell in corrections],
    }


def _release(name: str, versions: Mapping[str, str]) -> str:
    """The framework's own version among ``versions`` (its caller's first distribution)."""
    caller = FRAMEWORKS.get(name)
    distribution = caller.distributions[0] if caller is not None and caller.distributions else name
    return versions.get(distribution, "?")


def merge(paths: Iterable[Path]) -> dict[str, Any]:
    """One document from several; ValueError when two give the same (loss, framework) cell.

    A framework whose files hold more than one release of it (the skyrl session's 0.3 and the
    skyrl04 session's 0.4) gets one column per release, ``<framework> <version>``.
    """
    documents = [(Path(path), json.loads(Path(path).read_text())) for path in paths]
    releases: dict[str, set[str]] = {}
    for _, data in documents:
        for name, versions in data["frameworks"].items():
            releases.setdefault(name, set()).add(_release(name, versions))
    merged: dict[str, Any] = {"commands": [], "frameworks": {}, "cells": [], "corrections": []}
    seen: set[tuple[str, str]] = set()
    for path, data in documents:
        merged["commands"].append(data["command"])
        labels = {
            name: f"{name} {_release(name, versions)}" if len(releases[name]) > 1 else name
            for name, versions in data["frameworks"].items()
        }
        merged["frameworks"].update({labels[name]: versions for name, versions in data["frameworks"].items()})
        for cell in data["cells"]:
            cell = {**cell, "framework": labels.get(cell["framework"], cell["framework"])}
            key = (cell["loss"], cell["framework"])
            if key in seen:
                raise ValueError(f"{path}: the cell {key[0]} / {key[1]} is also in an earlier file")
            seen.add(key)
            merged["cells"].append(cell)
        for cell in data.get("corrections", []):
            merged["corrections"].append({**cell, "framework": labels.get(cell["framework"], cell["framework"])})
    return merged


def short(cell: Mapping[str, Any]) -> str:
    """The verdict as a table cell shows it."""
    verdict = cell["verdict"]
    if verdict == "split-dependent" and cell.get("split_factor") is not None:
        return f"split-dependent x{cell['split_factor']:.2f}"
    if verdict == "convention":
        names = ", ".join(cell["conventions"])
        return f"convention: {names}" + ("" if cell.get("verified") else " (unverified)")
    return verdict


def cause(cell: Mapping[str, Any]) -> str:
    """Why a cell is not identical, in one line."""
    parts = []
    if cell.get("d_loss") is not None:
        parts.append(f"dloss {cell['d_loss']:.3g}, dgrad {cell['d_grad']:.3g}")
    if cell["verdict"] == "split-dependent":
        deltas = ", ".join(f"{label} {delta:.3g}" for label, delta in cell["split_deltas"].items())
        parts.append(f"split differences: {deltas}")
    if cell["conventions"]:
        parts.append(
            "whole batch: " + ", ".join(cell["conventions"]) + ("" if cell.get("verified") else " (unverified)")
        )
    if cell.get("note"):
        parts.append(cell["note"])
    return "; ".join(parts)


def _column_order(label: str) -> tuple[int, tuple[int, ...], str]:
    """Table order of a column: the frameworks in ``FRAMEWORKS`` order, then the others; a
    framework's releases (``skyrl 0.3.0``, ``skyrl 0.4.0``) oldest first."""
    name, _, version = label.partition(" ")
    index = list(FRAMEWORKS).index(name) if name in FRAMEWORKS else len(FRAMEWORKS)
    numbers = tuple(int(part) for part in version.split(".") if part.isdigit())
    return index, numbers, label


def matrix(cells: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], dict[tuple[str, str], Mapping[str, Any]]]:
    """(losses, frameworks, {(loss, framework): cell}) in table order (``_column_order``)."""
    frameworks = sorted({cell["framework"] for cell in cells}, key=_column_order)
    losses = sorted({cell["loss"] for cell in cells})
    return losses, frameworks, {(cell["loss"], cell["framework"]): cell for cell in cells}


def release_changes(
    losses: Sequence[str], frameworks: Sequence[str], by_key: Mapping[tuple[str, str], Mapping[str, Any]]
) -> list[str]:
    """The page's section on the verdicts that changed between consecutive releases of a
    framework with a column per release (``merge``); no lines when no framework has two."""
    releases: dict[str, list[str]] = {}
    for label in frameworks:
        name, _, version = label.partition(" ")
        if version:
            releases.setdefault(name, []).append(label)
    lines = []
    for labels in releases.values():
        for before, after in zip(labels, labels[1:], strict=False):  # consecutive releases
            changed = [
                f"- {loss}: {short(by_key[(loss, before)])} -> {short(by_key[(loss, after)])}"
                for loss in losses
                if (loss, before) in by_key
                and (loss, after) in by_key
                and short(by_key[(loss, before)]) != short(by_key[(loss, after)])
            ]
            lines += [
                "",
                f"{before} -> {after}: " + ("the verdicts that changed:" if changed else "no verdict changed."),
            ]
            lines += [""] * bool(changed) + changed
    return ["", "## Between releases", *lines] if lines else []


def correction_section(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's section on rollout corrections (``audit.corrections``); no lines without cells."""
    if not cells:
        return []
    frameworks = sorted({cell["framework"] for cell in cells}, key=_column_order)
    rows = list(dict.fromkeys(cell["row"] for cell in cells))
    by_key = {(cell["row"], cell["framework"]): cell for cell in cells}
    lines = [
        "",
        "## Rollout corrections",
        "",
        "Each framework's own rollout-correction code against the registry's correction options on the same",
        "batches with rollout log-probs (`gmpo_plugins.compare.audit.corrections`): per valid token, the factor on",
        "its loss term (IS weight, 0 where masked or rejected) and whether it stays in the token count.",
        "Frameworks without a column here are not audited for corrections yet; `not shipped`: the framework",
        "has no setting for that correction.",
        "",
        "| correction | registry options | " + " | ".join(frameworks) + " |",
        "|---|---|" + "---|" * len(frameworks),
    ]
    for row in rows:
        options = next(cell["options"] for cell in cells if cell["row"] == row)
        verdicts = []
        for name in frameworks:
            cell = by_key.get((row, name))
            if cell is None:
                verdicts.append("-")
            elif cell["verdict"] == "differs":
                verdicts.append(f"differs (factor {cell['d_factor']:.3g}, {cell['count_differs']} tokens counted)")
            else:
                verdicts.append(cell["verdict"])
        lines.append(f"| {row} | `{options}` | " + " | ".join(verdicts) + " |")
    lines += ["", "| correction | framework | its setting | tokens acted on |", "|---|---|---|---|"]
    for cell in cells:
        if cell["setting"]:
            lines.append(f"| {cell['row']} | {cell['framework']} | `{cell['setting']}` | {cell['acted']:.0%} |")
    return lines


def markdown(merged: Mapping[str, Any]) -> str:
    """The docs page (docs/audit.md) of a merged document."""
    losses, frameworks, by_key = matrix(merged["cells"])
    lines = [
        "# `gmpo-plugins audit`",
        "",
        "Each framework's own implementation of each registry loss, called through the framework's own call site",
        "and config object with the registry's setting translated into it, held against the registry on the hard",
        f"batches of [`gmpo-plugins parity`](parity.md) in float64 (tolerance {TOLERANCE:g}, relative to",
        "max(1, |registry value|)). Each framework's nox session runs",
        "",
        "```",
        *sorted(set(merged["commands"])),
        "```",
        "",
        "and writes its cells to the file it names; this page is built from them (a framework tested at two releases",
        "gets a column per release) by",
        "",
        "```",
        MERGE_COMMAND,
        "```",
        "",
        "Framework versions: "
        + "; ".join(
            f"{name} ({', '.join(f'{dist} {version}' for dist, version in versions.items())})"
            for name, versions in merged["frameworks"].items()
        )
        + ".",
        "",
        "| loss | " + " | ".join(frameworks) + " |",
        "|---|" + "---|" * len(frameworks),
    ]
    for loss in losses:
        row = [short(by_key[(loss, name)]) if (loss, name) in by_key else "-" for name in frameworks]
        lines.append(f"| {loss} | " + " | ".join(row) + " |")
    lines += release_changes(losses, frameworks, by_key)
    lines += [
        "",
        "## Cells that are not identical",
        "",
        "| loss | framework | call | verdict | cause | metrics (beside) |",
        "|---|---|---|---|---|---|",
    ]
    for loss in losses:
        for name in frameworks:
            cell = by_key.get((loss, name))
            if cell is None or cell["verdict"] in ("identical", "not shipped"):
                continue
            metric = f"{cell['metric_key']}: {cell['d_metric']:.3g}" if cell.get("d_metric") is not None else "-"
            call = f"`{cell['call']}`" if cell["call"] else "-"
            lines.append(f"| {loss} | {name} | {call} | {short(cell)} | {cause(cell)} | {metric} |")
    lines += [
        "",
        "## Beside the verdict: float32 overflow",
        "",
        "Each reference on one float32 token with log ratio 89 (its exp overflows float32) and A = -1, the side no",
        "PPO-style clip bounds (`overflow_probe` in the cells); the registry bounds the log ratio at 20 first and",
        "stays finite.",
        "",
        "| loss | " + " | ".join(frameworks) + " |",
        "|---|" + "---|" * len(frameworks),
    ]
    for loss in losses:
        row = [(by_key.get((loss, name)) or {}).get("overflow_probe") or "-" for name in frameworks]
        if any(value != "-" for value in row):
            lines.append(f"| {loss} | " + " | ".join(row) + " |")
    lines += correction_section(merged.get("corrections", []))
    lines += [
        "",
        "## The setting in each framework",
        "",
        "The registry's defaults of each loss, as each framework's users set them (what the audit runs).",
        "",
        "| loss | framework | setting | note |",
        "|---|---|---|---|",
    ]
    for loss in losses:
        for name in frameworks:
            cell = by_key.get((loss, name))
            if cell is None or not cell.get("setting"):
                continue
            lines.append(f"| {loss} | {name} | `{cell['setting']}` | {cell.get('translation_note') or ''} |")
    lines += ["", "## Conventions", ""]
    for convention in CONVENTIONS.values():
        modelled = (
            f" Modelled: the registry with {dict(convention.core_hparams)}"
            if convention.core_hparams
            else (
                " Modelled: the registry dividing by the rows with a valid token."
                if not convention.count_empty_rows
                else ""
            )
        )
        lines.append(f"- **{convention.name}**: {convention.explanation}{modelled}")
    lines += ["", "## Upstream defects", ""]
    for defect in DEFECTS:
        lines.append(
            f"- **{defect.framework}: {defect.title}** ({', '.join(defect.losses)}; {defect.upstream}). "
            f"{defect.explanation} Reproducer: `{defect.test}`."
        )
    lines += [
        "",
        "## How it works",
        "",
        "::: gmpo_plugins.compare.audit.verdict",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "      show_root_toc_entry: false",
        "",
        "::: gmpo_plugins.compare.audit.batches",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "      show_root_toc_entry: false",
        "",
        "::: gmpo_plugins.compare.audit.translations",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "      show_root_toc_entry: false",
        "",
    ]
    return "\n".join(lines)
