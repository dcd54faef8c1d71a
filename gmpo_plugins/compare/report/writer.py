"""The report of ``gmpo-plugins compare``: metrics.jsonl, the terminal tables and report.md.

Tables (terminal and report.md), every number a mean ± 95% t interval over seeds
(``gmpo_plugins.compare.report.stats``; summaries: ``gmpo_plugins.compare.report.summary``):

    results             per (framework, loss): held-out accuracy, training reward, ratio
                        range, entropy, KL, clipping, wall time
    paired differences  first loss minus each other loss, same seed, with sign counts
    claims              the paper's claims, gmpo - comparator (GRPO at GMPO's ratio band, the
                        paper's comparison, then GRPO at its standard clip), with a verdict
    ablation            the paper's Table 3 next to the toy's held-out accuracy

report.md also lists every run's summary per seed, the plots and a reading guide.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gmpo_plugins.compare.report import claims, summary
from gmpo_plugins.compare.report.plots import PLOTS, write_plots  # noqa: F401 - re-exported for the command
from gmpo_plugins.compare.report.stats import INTERVAL_METHOD, Estimate


@dataclass
class Result:
    """Everything the tables show."""

    runs: dict  # (framework, loss) -> {seed: run summary}
    estimates: dict  # (framework, loss) -> {metric: Estimate or None}
    claims: list  # claims.Comparison
    paired: list  # claims.Comparison
    losses: list[str]


def build(records: list[dict[str, Any]], losses: list[str]) -> Result:
    runs = summary.per_seed(records)
    return Result(
        runs=runs,
        estimates={key: summary.over_seeds(value) for key, value in runs.items()},
        claims=claims.claim_rows(runs),
        paired=claims.paired_rows(runs, losses),
        losses=losses,
    )


def machine_label() -> str:
    """``"x86_64, <CPU model>, 2 cores; Linux; Python 3.11; torch 2.13.0"`` of this machine."""
    import os

    import torch

    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.machine()}, {model}, {os.cpu_count()} cores; {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}"
    )


def append_metrics(path: Path, record: dict[str, Any]) -> None:
    """Append one record to metrics.jsonl (one JSON object per line)."""
    with path.open("a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def _est(value: Estimate | None, spec: str = ".3f") -> str:
    return "-" if value is None else value.format(spec)


def _interval(row: claims.Comparison, spec: str = ".3g") -> str:
    estimate = row.difference.estimate
    if estimate.half_width is None:
        return f"{estimate.mean:+{spec}} (one seed: no interval)"
    return f"{estimate.mean:+{spec}} [{estimate.low:+{spec}}, {estimate.high:+{spec}}]"


Column = tuple[str, Callable[[Any], str]]


def result_columns(result: Result) -> tuple[list[Column], list[Any]]:
    columns: list[Column] = [
        ("framework", lambda k: k[0]),
        ("loss", lambda k: k[1]),
        ("seeds", lambda k: str(len(result.runs[k]))),
        ("held-out greedy", lambda k: _est(result.estimates[k]["heldout_greedy"])),
        ("held-out pass", lambda k: _est(result.estimates[k]["heldout_pass"])),
        ("train reward (last 5)", lambda k: _est(result.estimates[k]["reward_final"])),
        ("log-ratio 1-99% width", lambda k: _est(result.estimates[k]["ratio_width"], ".2f")),
        ("max |log ratio|", lambda k: _est(result.estimates[k]["max_abs_log_ratio"], ".2f")),
        ("entropy", lambda k: _est(result.estimates[k]["entropy"])),
        ("KL to init", lambda k: _est(result.estimates[k]["kl_init"], ".4f")),
        ("clip low / high", lambda k: f"{_est(result.estimates[k]['clip_low'], '.4f')} / "
                                      f"{_est(result.estimates[k]['clip_high'], '.4f')}"),
        ("wall s", lambda k: _est(result.estimates[k]["wall_s"], ".0f")),
    ]  # fmt: skip
    return columns, list(result.runs)


def paired_columns(result: Result) -> tuple[list[Column], list[Any]]:
    columns: list[Column] = [
        ("framework", lambda r: r.framework),
        ("difference", lambda r: f"{r.a} - {r.b}"),
        ("metric", lambda r: r.label),
        ("mean [95% interval]", _interval),
        ("seeds", lambda r: r.difference.signs(r.a, r.b)),
    ]
    return columns, result.paired


def claim_columns(result: Result) -> tuple[list[Column], list[Any]]:
    measures = {metric: measure for _, metric, measure, _ in claims.CLAIMS}
    columns: list[Column] = [
        ("framework", lambda r: r.framework),
        ("comparator", lambda r: f"{r.b}: {claims.comparator_label(r.b)}"),
        ("paper's claim", lambda r: r.label),
        ("measured as", lambda r: measures[r.metric]),
        ("gmpo", lambda r: _est(result.estimates[(r.framework, "gmpo")][r.metric], ".3g")),
        ("comparator value", lambda r: _est(result.estimates[(r.framework, r.b)][r.metric], ".3g")),
        ("gmpo - comparator [95% interval]", _interval),
        ("seeds", lambda r: r.difference.signs(r.a, r.b)),
        ("verdict", lambda r: r.verdict),
    ]
    return columns, result.claims


def ablation_columns(result: Result) -> tuple[list[Column], list[Any]]:
    def paper(key: tuple[str, str]) -> str:
        value = claims.paper_value(key[1])[1]
        return "-" if value is None else f"{value:.1f}"

    columns: list[Column] = [
        ("framework", lambda k: k[0]),
        ("variant", lambda k: k[1]),
        ("paper's name", lambda k: claims.paper_value(k[1])[0]),
        ("paper: pass@1 (%)", paper),
        ("toy: held-out greedy (%)", lambda k: _percent(result.estimates[k]["heldout_greedy"])),
        ("toy: held-out pass (%)", lambda k: _percent(result.estimates[k]["heldout_pass"])),
        ("toy: seeds", lambda k: str(len(result.runs[k]))),
    ]
    return columns, list(result.runs)


def _percent(value: Estimate | None) -> str:
    if value is None:
        return "-"
    return Estimate(100 * value.mean, None if value.half_width is None else 100 * value.half_width, value.n).format(
        ".1f"
    )


TABLES = (
    ("Results (mean ± 95% t interval over seeds)", result_columns),
    ("Paired differences between losses (same seed)", paired_columns),
    ("The paper's claims, gmpo - comparator (same seed)", claim_columns),
    ("Ablation table: the paper's Table 3 and the toy", ablation_columns),
)


def rich_tables(result: Result) -> list:
    """The terminal tables (``rich.table.Table``), empty ones left out."""
    from rich.table import Table

    tables = []
    for title, make in TABLES:
        columns, rows = make(result)
        if not rows:
            continue
        table = Table(title=title)
        for name, _ in columns:
            table.add_column(name, overflow="fold")
        for row in rows:
            table.add_row(*(cell(row) for _, cell in columns))
        tables.append(table)
    return tables


def markdown_table(columns: list[Column], rows: list[Any]) -> str:
    header = "| " + " | ".join(name.replace("|", "\\|") for name, _ in columns) + " |"
    rule = "|" + "---|" * len(columns)
    body = ["| " + " | ".join(cell(row).replace("|", "\\|") for _, cell in columns) + " |" for row in rows]
    return "\n".join([header, rule, *body])


def per_seed_table(result: Result) -> str:
    keys = ("heldout_greedy", "heldout_pass", "heldout_drop", "reward_final", "ratio_width", "max_abs_log_ratio",
            "entropy", "kl_init")  # fmt: skip
    columns: list[Column] = [("framework", lambda r: r[0]), ("loss", lambda r: r[1]), ("seed", lambda r: str(r[2]))]

    def cell(key: str) -> Callable[[Any], str]:
        return lambda r: "-" if r[3][key] is None else f"{r[3][key]:.4g}"

    columns += [(key, cell(key)) for key in keys]
    rows = [(f, loss, seed, s) for (f, loss), seeds in result.runs.items() for seed, s in seeds.items()]
    return markdown_table(columns, rows)


SECTION_NOTES = {
    "Results (mean ± 95% t interval over seeds)": (
        "Held-out: the task's fixed held-out prompts (never trained on), at the last step: greedy exact match and "
        "the sampled pass rate (4 samples per prompt, temperature 1). Log-ratio width: 1st-99th percentile of "
        "log(pi_after/pi_old) over the step's tokens after its updates, mean over steps; max |log ratio|: the "
        "largest the loss path saw in the run."
    ),
    "Paired differences between losses (same seed)": (
        "Each seed gives one difference (both losses start from that seed's model and first rollout); the "
        "interval is over those differences; the seed count says on how many seeds the sign held."
    ),
    "The paper's claims, gmpo - comparator (same seed)": (
        "Verdict: supported when the whole 95% interval of the difference has the claimed sign, contradicted "
        "when it has the opposite sign, inconclusive when it contains 0 (or with one seed). GMPO clips log "
        "ratios at ±0.4. Comparators: grpo_clip_wider clips GRPO's ratios to the same band, e^-0.4..e^0.4 "
        "(0.670..1.492): the paper's comparison (the authors' grpo_clip_wider); grpo clips them at the "
        "standard 0.8..1.2, a narrower per-token band than GMPO's, so its rows test a different claim."
    ),
    "Ablation table: the paper's Table 3 and the toy": (
        f"Paper's numbers ({claims.PAPER_SOURCE}) are given for scale only; the toy's are held-out accuracies "
        "of a 0.1M-parameter model on a toy task, in percent, mean ± 95% t interval over seeds. Compare the "
        "order of the rows, not the numbers."
    ),
}


def write_markdown(path: Path, result: Result, *, command: str, setup: dict[str, Any], plots: list[str]) -> None:
    from gmpo_plugins.compare.report.guide import READING_GUIDE

    lines = [
        "# gmpo-plugins compare",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine_label()}",
        "",
        f"Intervals: {INTERVAL_METHOD}. Other CPUs (and other torch builds) draw other samples from the same "
        "seeds, so their numbers differ; the same machine, seed and command give identical numbers.",
        "",
        "## Setup",
        "",
        *[f"- {key}: {value}" for key, value in setup.items()],
        "",
    ]
    for title, make in TABLES:
        columns, rows = make(result)
        lines += [f"## {title}", "", f"<!-- table:{make.__name__} -->"]
        lines += [markdown_table(columns, rows) if rows else "(needs gmpo and grpo, or two losses)"]
        lines += [f"<!-- /table:{make.__name__} -->", "", SECTION_NOTES[title], ""]
    lines += ["## Per seed", "", per_seed_table(result), ""]
    lines += ["## Plots", "", *[f"![{PLOTS[name]}]({name})\n" for name in plots], READING_GUIDE]
    path.write_text("\n".join(lines))
