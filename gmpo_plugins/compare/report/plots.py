"""PNG plots of ``gmpo-plugins compare``: one curve per (framework, loss), the mean over
seeds, with a band of the 95% t interval over seeds at each step (no band with one seed).

    reward.png        training reward (running mean of 5 steps per seed) vs step
    heldout.png       held-out greedy exact match and sampled pass rate vs step
    ratio_range.png   the paper's Figure 1 view: per step, the 1-99% band of the token log
                      ratio log(pi_after/pi_old) (mean over seeds of each percentile), and
                      the max |log ratio| the loss path saw
    entropy_kl.png    entropy and KL to the initial policy vs step
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gmpo_plugins.compare.report.stats import mean_interval
from gmpo_plugins.compare.report.summary import FINAL_WINDOW, group_runs

PLOTS = {
    "reward.png": "training reward vs step, mean over seeds with 95% band",
    "heldout.png": "held-out accuracy vs step, mean over seeds with 95% band",
    "ratio_range.png": "importance-ratio range vs step (the paper's Figure 1 view), mean over seeds",
    "entropy_kl.png": "entropy and KL to the initial policy vs step, mean over seeds with 95% band",
}
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")
DASHES = ("-", "--", ":", "-.")


def _running_mean(values: list[float], window: int) -> list[float]:
    return [sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1]) for i in
            range(len(values))]  # fmt: skip


def _by_curve(records: list[dict[str, Any]]) -> dict[tuple[str, str], list[list[dict[str, Any]]]]:
    curves: dict[tuple[str, str], list[list[dict[str, Any]]]] = {}
    for (framework, loss, _), rows in group_runs(records).items():
        curves.setdefault((framework, loss), []).append(rows)
    return curves


def _value(record: dict[str, Any], key: str) -> float | None:
    """``record[key]``; ``max_abs_log_ratio`` is derived from the loss path's min and max."""
    if key == "max_abs_log_ratio":
        if record.get("log_ratio_min") is None or record.get("log_ratio_max") is None:
            return None
        return max(abs(record["log_ratio_min"]), abs(record["log_ratio_max"]))
    value = record.get(key)
    return value if value is not None and math.isfinite(value) else None


def _series(run: list[dict[str, Any]], key: str, smooth: bool = False) -> dict[int, float]:
    pairs = [(r["step"], value) for r in run if (value := _value(r, key)) is not None]
    values = [value for _, value in pairs]
    if smooth:
        values = _running_mean(values, FINAL_WINDOW)
    return {step: value for (step, _), value in zip(pairs, values, strict=True)}


def _band(runs: list[list[dict[str, Any]]], key: str, smooth: bool = False):
    """(steps, mean, low, high) over the runs (seeds) at the steps every run has."""
    series = [_series(run, key, smooth) for run in runs]
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    mean, low, high = [], [], []
    for step in steps:
        estimate = mean_interval([s[step] for s in series])
        mean.append(estimate.mean)
        low.append(estimate.low if estimate.low is not None else estimate.mean)
        high.append(estimate.high if estimate.high is not None else estimate.mean)
    return steps, mean, low, high


def _style(key: tuple[str, str], losses: list[str], frameworks: list[str]) -> dict[str, Any]:
    framework, loss = key
    index = losses.index(loss) if loss in losses else len(losses)
    return {
        "color": COLOURS[index % len(COLOURS)],
        "linestyle": DASHES[frameworks.index(framework) % len(DASHES)],
        "label": loss if len(frameworks) == 1 else f"{loss} ({framework})",
    }


def _curve(ax, runs, key: str, style: dict[str, Any], smooth: bool = False, marker: str | None = None) -> None:
    """Mean over seeds and its 95% band; every quantity drawn this way is >= 0, so is the band."""
    steps, mean, low, high = _band(runs, key, smooth)
    if steps:
        ax.plot(steps, mean, linewidth=2, marker=marker, **style)
        ax.fill_between(steps, [max(0.0, v) for v in low], high, color=style["color"], alpha=0.2, linewidth=0)


def write_plots(directory: Path, records: list[dict[str, Any]], losses: list[str]) -> list[str]:
    """Write the PNGs of ``PLOTS`` into ``directory``; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = _by_curve(records)
    frameworks = list(dict.fromkeys(f for f, _ in curves))
    seeds = max(len(runs) for runs in curves.values())
    note = f"mean over {seeds} seed(s); band: 95% t interval over seeds"

    def finish(fig, axes, name: str, title: str, band: str = note) -> None:
        for ax in axes:
            ax.grid(alpha=0.3)
        axes[-1].set_xlabel("RL step")
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{title}\n{band}", fontsize=10)
        fig.tight_layout()
        fig.savefig(directory / name)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for key, runs in curves.items():
        _curve(ax, runs, "reward", _style(key, losses, frameworks), smooth=True)
    ax.set_ylabel(f"training reward\n(running mean of {FINAL_WINDOW} steps)")
    finish(fig, [ax], "reward.png", "Training reward (exact-match rate of the sampled completions)")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), dpi=100, sharex=True)
    for key, runs in curves.items():
        style = _style(key, losses, frameworks)
        _curve(top, runs, "heldout_greedy", style, marker="o")
        _curve(bottom, runs, "heldout_pass", style, marker="o")
    top.set_ylabel("held-out greedy\nexact match")
    bottom.set_ylabel("held-out sampled\npass rate")
    finish(fig, [top, bottom], "heldout.png", "Held-out prompts (never trained on)")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), dpi=100, sharex=True)
    for key, runs in curves.items():
        style = _style(key, losses, frameworks)
        steps, low, _, _ = _band(runs, "post_log_ratio_q01")
        _, high, _, _ = _band(runs, "post_log_ratio_q99")
        if steps:
            top.fill_between(steps, low, high, color=style["color"], alpha=0.3, linewidth=0, label=style["label"])
            top.plot(steps, low, color=style["color"], linestyle=style["linestyle"], linewidth=1)
            top.plot(steps, high, color=style["color"], linestyle=style["linestyle"], linewidth=1)
        _curve(bottom, runs, "max_abs_log_ratio", style)
    top.axhline(0, color="black", linewidth=0.5)
    top.set_ylabel("token log ratio after the updates\nband: 1st-99th percentile")
    bottom.set_ylabel("max |token log ratio|\nseen by the loss")
    bands = f"top: each percentile averaged over {seeds} seed(s); bottom: mean over seeds, band: 95% t interval"
    finish(
        fig, [top, bottom], "ratio_range.png", "Importance-ratio range per rollout batch (paper's Figure 1 view)", bands
    )

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), dpi=100, sharex=True)
    for key, runs in curves.items():
        style = _style(key, losses, frameworks)
        _curve(top, runs, "entropy", style)
        _curve(bottom, runs, "kl_init", style)
    top.set_ylabel("entropy per token (nats)")
    bottom.set_ylabel("KL(policy || initial)\nper token")
    finish(fig, [top, bottom], "entropy_kl.png", "Entropy and KL to the initial policy")
    return list(PLOTS)
