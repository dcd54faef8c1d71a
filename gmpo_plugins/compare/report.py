"""The report of ``gmpo-plugins compare``: summary rows, the terminal table, report.md and
PNG plots (reward, importance-ratio range, entropy and KL vs step; runs overlaid).

Summary of one (framework, loss) run from its per-step records:

    reward_first     reward of step 1 (identical for every loss: same initial policy)
    reward_final     mean reward of the last min(5, steps) steps
    reward_best      best single-step reward
    log_ratio_min/max    range over the run of the per-token log ratio log(pi_theta/pi_old)
    seq_weight_min/max   range over the run of the per-sequence weight exp(mean_t log ratio)
    clip_frac(_low/_high)  mean over steps of the clipped-token fractions
    post_log_ratio_q01/q99  mean over steps of the 1st/99th percentile of the per-token log
                         ratio after the step's updates (trainer-measured)
    kl_init, entropy     at the last step (exact, over the vocabulary, per valid token)
    wall_s               wall time of the run (warm-up excluded)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional

FINAL_WINDOW = 5
PLOTS = {
    "reward.png": "reward (exact-match rate) vs step",
    "ratio_range.png": "importance-ratio range vs step",
    "entropy.png": "entropy vs step",
    "kl.png": "KL to the initial policy vs step",
}


def run_key(record: dict[str, Any]) -> tuple[str, str]:
    return record["framework"], record["loss_name"]


def group_runs(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        runs.setdefault(run_key(record), []).append(record)
    return runs


def _values(records: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in records if key in r]


def summarise(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary row per (framework, loss), in the order the runs appear."""
    rows = []
    for (framework, loss_name), steps in group_runs(records).items():
        rewards = _values(steps, "reward")
        row: dict[str, Any] = {
            "framework": framework,
            "loss_name": loss_name,
            "steps": len(steps),
            "reward_first": rewards[0],
            "reward_final": sum(rewards[-FINAL_WINDOW:]) / len(rewards[-FINAL_WINDOW:]),
            "reward_best": max(rewards),
            "kl_init": steps[-1].get("kl_init"),
            "entropy": steps[-1].get("entropy"),
            "wall_s": steps[-1].get("elapsed_s"),
        }
        for key, pick in (
            ("log_ratio_min", min),
            ("log_ratio_max", max),
            ("seq_weight_min", min),
            ("seq_weight_max", max),
        ):
            values = _values(steps, key)
            row[key] = pick(values) if values else None
        for key in ("clip_frac", "clip_frac_low", "clip_frac_high", "post_log_ratio_q01", "post_log_ratio_q99"):
            values = _values(steps, key)
            row[key] = sum(values) / len(values) if values else None
        rows.append(row)
    return rows


def _fmt(value: Optional[float], spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _range(low: Optional[float], high: Optional[float]) -> str:
    return "-" if low is None or high is None else f"[{low:.2f}, {high:.2f}]"


def _clip(row: dict[str, Any]) -> str:
    """Low/high clip fractions; the total alone when a framework reports only that."""
    if row["clip_frac_low"] is None and row["clip_frac_high"] is None and row["clip_frac"] is not None:
        return f"{row['clip_frac']:.4f} (total)"
    return f"{_fmt(row['clip_frac_low'], '.4f')} / {_fmt(row['clip_frac_high'], '.4f')}"


TABLE_COLUMNS = (
    ("framework", lambda r: r["framework"]),
    ("loss", lambda r: r["loss_name"]),
    ("reward 1st", lambda r: _fmt(r["reward_first"])),
    (f"final (last {FINAL_WINDOW})", lambda r: _fmt(r["reward_final"])),
    ("best", lambda r: _fmt(r["reward_best"])),
    ("log-ratio min/max", lambda r: _range(r["log_ratio_min"], r["log_ratio_max"])),
    ("log-ratio 1-99%", lambda r: _range(r["post_log_ratio_q01"], r["post_log_ratio_q99"])),
    ("seq weight min/max", lambda r: _range(r["seq_weight_min"], r["seq_weight_max"])),
    ("clip low/high", lambda r: _clip(r)),
    ("KL to init", lambda r: _fmt(r["kl_init"], ".4f")),
    ("entropy", lambda r: _fmt(r["entropy"])),
    ("wall s", lambda r: _fmt(r["wall_s"], ".1f")),
)


def rich_table(rows: list[dict[str, Any]]):
    """The final terminal table (a ``rich.table.Table``)."""
    from rich.table import Table

    table = Table(title="gmpo-plugins compare")
    for name, _ in TABLE_COLUMNS:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(cell(row) for _, cell in TABLE_COLUMNS))
    return table


def markdown_table(rows: list[dict[str, Any]]) -> str:
    header = "| " + " | ".join(name for name, _ in TABLE_COLUMNS) + " |"
    rule = "|" + "---|" * len(TABLE_COLUMNS)
    body = ["| " + " | ".join(cell(row) for _, cell in TABLE_COLUMNS) + " |" for row in rows]
    return "\n".join([header, rule, *body])


def append_metrics(path: Path, record: dict[str, Any]) -> None:
    """Append one record to metrics.jsonl (one JSON object per line)."""
    with path.open("a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def _style(framework: str, loss_name: str, frameworks: list[str], losses: list[str]) -> dict[str, Any]:
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray"]
    dashes = ["-", "--", ":", "-."]
    return {
        "color": colours[losses.index(loss_name) % len(colours)],
        "linestyle": dashes[frameworks.index(framework) % len(dashes)],
        "label": f"{loss_name} ({framework})",
    }


def write_plots(directory: Path, records: list[dict[str, Any]]) -> list[str]:
    """Write the PNGs of ``PLOTS`` into ``directory``; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = group_runs(records)
    frameworks = sorted({f for f, _ in runs})
    losses = sorted({loss for _, loss in runs})

    def series(steps: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
        kept = [r for r in steps if key in r and r[key] is not None and math.isfinite(r[key])]
        return [r["step"] for r in kept], [r[key] for r in kept]

    def single(name: str, key: str, ylabel: str, smooth: bool = False) -> None:
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        for (framework, loss_name), steps in runs.items():
            style = _style(framework, loss_name, frameworks, losses)
            x, y = series(steps, key)
            if smooth:
                ax.plot(x, y, marker=".", alpha=0.35, color=style["color"], linestyle=style["linestyle"])
                style["label"] += f", mean of last {FINAL_WINDOW}"
                y = [
                    sum(y[max(0, i - FINAL_WINDOW + 1) : i + 1]) / len(y[max(0, i - FINAL_WINDOW + 1) : i + 1])
                    for i in range(len(y))
                ]
                ax.plot(x, y, linewidth=2, **style)
            else:
                ax.plot(x, y, marker=".", **style)
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(directory / name)
        plt.close(fig)

    single("reward.png", "reward", "reward (exact-match rate)", smooth=True)
    single("entropy.png", "entropy", "entropy per token (nats)")
    single("kl.png", "kl_init", "KL(policy || initial) per token")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 5.6), dpi=100, sharex=True)
    for (framework, loss_name), steps in runs.items():
        style = _style(framework, loss_name, frameworks, losses)
        for ax, low_key, high_key, band_low, band_high in (
            (top, "log_ratio_min", "log_ratio_max", "post_log_ratio_q01", "post_log_ratio_q99"),
            (bottom, "seq_weight_min", "seq_weight_max", None, None),
        ):
            x, low = series(steps, low_key)
            _, high = series(steps, high_key)
            if x:
                ax.plot(x, low, linewidth=0.8, **style)
                ax.plot(x, high, linewidth=0.8, color=style["color"], linestyle=style["linestyle"])
                if band_low is None:
                    ax.fill_between(x, low, high, color=style["color"], alpha=0.15)
            if band_low is not None:
                bx, blow = series(steps, band_low)
                _, bhigh = series(steps, band_high)
                if bx:
                    ax.fill_between(bx, blow, bhigh, color=style["color"], alpha=0.35)
    top.set_ylabel("token log ratio\nlines: min/max, band: 1-99%")
    bottom.set_ylabel("sequence weight\nmin/max")
    bottom.set_xlabel("RL step")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    top.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / "ratio_range.png")
    plt.close(fig)
    return list(PLOTS)


def _width(row: dict[str, Any]) -> Optional[float]:
    low, high = row["post_log_ratio_q01"], row["post_log_ratio_q99"]
    return None if low is None or high is None else high - low


def _findings(rows: list[dict[str, Any]]) -> list[str]:
    """Factual GMPO-vs-GRPO sentences for each framework that ran both."""
    lines = []
    by_key = {(r["framework"], r["loss_name"]): r for r in rows}
    for framework in sorted({r["framework"] for r in rows}):
        gmpo, grpo = by_key.get((framework, "gmpo")), by_key.get((framework, "grpo"))
        if gmpo is None or grpo is None:
            continue

        pairs = [
            ("final reward", gmpo["reward_final"], grpo["reward_final"]),
            ("final entropy", gmpo["entropy"], grpo["entropy"]),
            ("final KL to init", gmpo["kl_init"], grpo["kl_init"]),
            (
                "1-99% token log-ratio width (mean over steps)",
                _width(gmpo),
                _width(grpo),
            ),
        ]
        lines.append(
            f"- {framework}: "
            + "; ".join(f"{label}: gmpo {_fmt(a, '.4g')} vs grpo {_fmt(b, '.4g')}" for label, a, b in pairs)
            + "."
        )
    return lines


READING_GUIDE = """\
## How to read it

- **reward.png**: fraction of sampled completions (temperature 1) that reverse the digit
  string exactly. All runs start from the same warmed-up model and see the same first
  rollout, so step 1 is identical across losses; later steps differ because the updates do.
  One step has only prompts x group completions, so single-step values are noisy: compare
  the trend and the "final (last 5)" column, not one point.
- **ratio_range.png**: top, per-token log importance ratio log(pi_theta/pi_old): the lines
  are the smallest and largest value the loss saw in each step's updates (reported by the
  loss path), the shaded band the 1st-99th percentile after the step's last update
  (measured by the trainer); bottom, the per-sequence weight exp(mean_t log ratio), min and
  max. This is the quantity of the GMPO paper's Figure 1: a narrower band means the policy
  moved less per rollout batch. The extremes come from single tokens and jump from step to
  step; the percentile band is the steadier signal. GMPO's clip acts on log ratios
  (default +-0.4), GRPO's on ratios (0.8..1.2), so equal bands are not expected.
- **entropy.png** / **kl.png**: mean per-token entropy of the policy and its exact KL to
  the initial (warmed-up) policy, on the sampled responses. The paper reports higher
  entropy and lower KL for GMPO at 7B scale; here you can see whether a toy run agrees.
- The table's clip columns are fractions of valid tokens whose clipped value was chosen
  (low side: A < 0; high side: A > 0), averaged over steps.

## What this run does and does not show

It runs both losses through the chosen framework's real loss call path on identical data
and prints the importance-ratio spread, clipping, KL and entropy each produces. It does
**not** reproduce the paper's benchmark claims: the model has ~0.1M parameters, the task
is a toy with short fixed-length answers, a run is a few dozen steps on one seed, and the
reward curves of two losses on one seed differ by sampling noise as much as by the loss.
Run several seeds (`--seed`) before reading anything into a reward difference.
"""


def write_markdown(
    path: Path, rows: list[dict[str, Any]], *, command: str, setup: dict[str, Any], plots: list[str]
) -> None:
    lines = [
        "# gmpo-plugins compare",
        "",
        f"Command: `{command}`",
        "",
        "## Setup",
        "",
        *[f"- {key}: {value}" for key, value in setup.items()],
        "",
        "## Results",
        "",
        markdown_table(rows),
        "",
        *_findings(rows),
        "",
        *[f"![{PLOTS[name]}]({name})\n" for name in plots],
        READING_GUIDE,
    ]
    path.write_text("\n".join(lines))
