"""The report of a run: ``report.md`` (status, the first RL step compared between every pair of
frameworks after each of its optimiser steps, ``steps.png`` with one line per framework per
metric, a per-step table per metric, differences) and ``records.json`` (every framework's
records, in the ``metrics`` vocabulary, and the first-RL-step comparisons, one per pair and
optimiser step, with their overall verdict).

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

from gmpo_plugins.frameworks.first_update import (
    PROPORTIONAL,
    REAL_DIFFERENCE,
    SIGN_LIKE,
    FirstUpdateError,
    PairComparison,
    compare_steps,
    comparison,
    initial_parameters,
    overall,
)
from gmpo_plugins.frameworks.launch import Launch
from gmpo_plugins.frameworks.metrics import VOCABULARY
from gmpo_plugins.frameworks.plots import write_plot
from gmpo_plugins.frameworks.runner import FrameworkRun
from gmpo_plugins.frameworks.spec import RunSpec


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


def first_updates(
    spec: RunSpec, runs: Sequence[FrameworkRun], launches: Sequence[Launch]
) -> tuple[list[PairComparison], str]:
    """Every pair of complete runs that left their parameters after each optimiser step of the
    first RL step, compared after each (``first_update.compare_steps``), and why none could be
    compared ("" when some were)."""
    saved = {run.framework: (run.step_params, run.records) for run in runs if run.complete and run.step_params}
    if len(saved) < 2:
        return [], "fewer than two complete runs left their parameters after the first RL step (the CPU stand-ins do)"
    by_name = {launch.framework: launch for launch in launches}
    try:
        initial = initial_parameters(spec.model)
        kind = comparison(spec.optimizer, spec.adam_eps)
        pairs = compare_steps(initial, saved, by_name, spec.dtype, kind, spec.learning_rate, spec.weight_decay)
    except FirstUpdateError as exc:
        return [], f"not compared: {exc}"
    return pairs, ""


def _verdict(pair: PairComparison) -> str:
    if pair.tolerance is None:
        return "no verdict (the tolerance holds for float32)"
    if pair.identical is None:
        return f"no verdict (the tolerance reaches a real difference, {REAL_DIFFERENCE:g})"
    return "identical" if pair.identical else "DIFFERENT"


def _overall(pairs: Sequence[PairComparison]) -> str:
    verdict = overall(pairs)
    if verdict is None:
        return "Overall: no verdict (no optimiser step has one)"
    if verdict:
        return "Overall: identical (every optimiser step with a verdict)"
    steps = sorted({pair.step for pair in pairs if pair.identical is False})
    return f"Overall: DIFFERENT (from optimiser step {steps[0]} on: {', '.join(map(str, steps))})"


def _rewards(pair: PairComparison) -> str:
    first, second = pair.rewards
    if pair.same_rewards is None:
        return "not logged"
    return f"{first:.6g}" if pair.same_rewards else f"differ: {first:.6g} / {second:.6g}"


def _explanation(pair: PairComparison) -> str:
    if pair.identical is not False:
        return ""
    if pair.causes:
        return "; ".join(pair.causes)
    if pair.same_rewards is False:
        return "the first rollouts differ (step-1 rewards), and no named behaviour explains it"
    return "none of the named behaviours differs: unexplained"


def first_update_lines(pairs: Sequence[PairComparison], why_not: str) -> list[str]:
    """The report's first-RL-step section (``first_update``): a table of pairs per optimiser step."""
    lines = ["", "## First RL step", ""]
    if not pairs:
        return [*lines, f"({why_not})"]
    steps = max(pair.step for pair in pairs)
    lines += [
        f"Parameter difference after each optimiser step k of the first RL step ({steps} on the first rollout "
        "batch), relative to the update (float32 tolerance (2^k - 1) * 1e-5 for k chained steps, a verdict "
        f"where it stays below {REAL_DIFFERENCE:g}, the size of a real difference; "
        "`gmpo_plugins.frameworks.first_update`). Where two frameworks differ, the behaviours of theirs that "
        "reach the first RL step and differ are named.",
        "",
        *(f"- {kind}: {COMPARISONS[kind]}" for kind in dict.fromkeys(pair.kind for pair in pairs)),
        "",
        _overall(pairs),
    ]
    for step in range(1, steps + 1):
        lines += [
            "",
            f"### Optimiser step {step} of {steps}",
            "",
            "| frameworks | comparison | rel. difference | tolerance | verdict | step-1 reward | "
            "named behaviours that differ |",
            "|---|---|---|---|---|---|---|",
        ]
        for pair in (pair for pair in pairs if pair.step == step):
            tolerance = "" if pair.tolerance is None else f"{pair.tolerance:g}"
            lines.append(
                f"| {pair.first} / {pair.second} | {pair.kind or 'none'} | {pair.rel:.2e} | {tolerance} | "
                f"{_verdict(pair)} | {_rewards(pair)} | {_explanation(pair)} |"
            )
    return lines


COMPARISONS = {
    PROPORTIONAL: "SGD, or AdamW with an eps far above every gradient entry (step = lr / eps * momentum): the "
    "largest entry of the difference over the largest entry of the update; a rounding difference stays "
    "proportional to the gradient and at most doubles per chained step",
    SIGN_LIKE: "AdamW with eps 1e-8, the setting all four trainers share (step nearly lr * sign): the norm of "
    "the difference over the norm of the update, over the coordinates whose first gradient is at least 1000 eps "
    "in both runs (their first step reaches 0.999 lr; a gradient near eps makes a step that its rounding moves by "
    "up to lr * rounding / eps); Adam divides each coordinate by its own gradient's size, so a relative rounding "
    "error moves a step by at most 1.3 times itself over two steps, while a coordinate whose gradient cancels "
    "to its rounding may flip sign (the largest entry does not resolve it); an overall scale of the gradient is "
    "not seen",
    None: "AdamW with an eps between the two settings: no derivation holds, no verdict",
}


def write_report(
    out: Path, spec_path: str, spec: RunSpec, runs: Sequence[FrameworkRun], launches: Sequence[Launch]
) -> bool:
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
    pairs, why_not = first_updates(spec, runs, launches)
    lines += first_update_lines(pairs, why_not)
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
    comparisons = [
        {
            "optimiser_step": pair.step,
            "frameworks": [pair.first, pair.second],
            "comparison": pair.kind,
            "rel": pair.rel,
            "tolerance": pair.tolerance,
            "identical": pair.identical,
            "step_one_rewards": list(pair.rewards),
            "causes": list(pair.causes),
        }
        for pair in pairs
    ]
    summary = {"runs": records, "first_update": comparisons, "first_update_identical": overall(pairs)}
    (out / "records.json").write_text(json.dumps(summary, indent=1) + "\n")
    return complete
