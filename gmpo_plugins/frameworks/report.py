"""The report of a run: ``report.md`` (status, ``steps.png`` with one line per framework per
metric, a per-step table per metric, differences) and ``records.json`` (every framework's
records, in the ``metrics`` vocabulary).

A framework whose trainer failed or was stopped is listed as incomplete with the end of its
output; the other frameworks' results are kept. The report is marked incomplete when any
framework is. The stand-ins a framework ran with (CPU stand-ins for its GPU parts) are
named beside its status.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

from gmpo_plugins.frameworks.launch import Launch
from gmpo_plugins.frameworks.metrics import VOCABULARY
from gmpo_plugins.frameworks.plots import write_plot
from gmpo_plugins.frameworks.runner import FrameworkRun


def _value(record: dict[str, float] | None, name: str) -> str:
    return "" if record is None or name not in record else f"{record[name]:.4g}"


def step_tables(runs: Sequence[FrameworkRun]) -> str:
    """One markdown table per metric that some framework logged: a row per RL step, a column per framework."""
    by_step = {run.framework: {int(r["step"]): r for r in run.records} for run in runs}
    steps = sorted({step for records in by_step.values() for step in records})
    parts = []
    for name in VOCABULARY:
        if not any(name in r for run in runs for r in run.records):
            continue
        header = "| step | " + " | ".join(run.framework for run in runs) + " |"
        rule = "|---" * (len(runs) + 1) + "|"
        rows = [
            f"| {step} | " + " | ".join(_value(by_step[run.framework].get(step), name) for run in runs) + " |"
            for step in steps
        ]
        parts.append(f"### {name}\n\n" + "\n".join([header, rule, *rows]))
    return "\n\n".join(parts)


def _plot_line(out: Path, runs: Sequence[FrameworkRun]) -> str:
    """The report's line for ``steps.png`` (``plots``), written here when matplotlib is installed."""
    if importlib.util.find_spec("matplotlib") is None:
        return "(no plot: matplotlib is not installed; `pip install gmpo-plugins[report]` adds it)"
    name = write_plot(out, runs)
    return "(no plot: no metrics)" if name is None else f"![one line per framework per metric]({name})"


def write_report(out: Path, spec_path: str, runs: Sequence[FrameworkRun], launches: Sequence[Launch]) -> bool:
    """Write ``report.md`` and ``records.json`` under ``out``; True when every run is complete."""
    complete = all(run.complete for run in runs) and len(runs) == len(launches)
    ran = {run.framework for run in runs}
    lines = [f"# gmpo-plugins frameworks {spec_path}", ""]
    lines.append("Status: complete" if complete else "Status: INCOMPLETE")
    lines.append("")
    lines.append("| framework | status | seconds | RL steps | stand-ins |")
    lines.append("|---|---|---|---|---|")
    for run in runs:
        status = "complete" if run.complete else "incomplete: " + run.failure.splitlines()[0]
        standins = run.standins or "none"
        lines.append(f"| {run.framework} | {status} | {run.seconds:.1f} | {len(run.records)} | {standins} |")
    for launch in launches:
        if launch.framework not in ran:
            lines.append(f"| {launch.framework} | incomplete: not run (interrupted) | | 0 | |")
    lines += ["", "## Per step", "", _plot_line(out, runs), "", step_tables(runs) or "(no metrics)"]
    lines += ["", "## Differences the spec cannot remove"]
    for launch in launches:
        lines.append(f"\n{launch.framework} (launch: `{launch.framework}/launch.sh`):\n")
        lines += [f"- {d.topic}: {d.behaviour}" for d in launch.differences]
    failures = [run for run in runs if not run.complete]
    if failures:
        lines += ["", "## Failures"]
        for run in failures:
            lines += ["", f"### {run.framework}", "", "```", run.failure, "```"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    records = {
        run.framework: {"complete": run.complete, "standins": run.standins, "records": run.records} for run in runs
    }
    (out / "records.json").write_text(json.dumps(records, indent=1) + "\n")
    return complete
