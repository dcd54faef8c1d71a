"""``steps.png`` of a run's report: one panel per metric some framework logged, one line per
framework over the RL steps (matplotlib, the ``report`` extra).

Each framework keeps one colour, its place in ``translate.FRAMEWORKS`` in the colours of
``gmpo-plugins compare``'s plots (``compare.report.plots.COLOURS``). A value that is not
finite is left out of its line (the per-step tables show every logged value).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from gmpo_plugins.compare.report.plots import COLOURS
from gmpo_plugins.frameworks.metrics import VOCABULARY
from gmpo_plugins.frameworks.runner import FrameworkRun
from gmpo_plugins.frameworks.translate import FRAMEWORKS

PLOT = "steps.png"
COLUMNS = 2


def plotted_metrics(runs: Sequence[FrameworkRun]) -> list[str]:
    """The vocabulary's metrics that some run logged, in vocabulary order."""
    return [name for name in VOCABULARY if any(name in record for run in runs for record in run.records)]


def write_plot(out: Path, runs: Sequence[FrameworkRun]) -> str | None:
    """Write ``out/steps.png``; returns its name, or None when no run logged a metric."""
    names = plotted_metrics(runs)
    if not names:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = math.ceil(len(names) / COLUMNS)
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(9, 2.2 * rows), dpi=100, squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        for run in runs:
            points = [(r["step"], r[name]) for r in run.records if name in r and math.isfinite(r[name])]
            if points:
                steps, values = zip(*points, strict=True)
                colour = COLOURS[FRAMEWORKS.index(run.framework) % len(COLOURS)]
                ax.plot(steps, values, marker="o", color=colour, label=run.framework)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # RL steps
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    fig.supxlabel("RL step", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / PLOT)
    plt.close(fig)
    return PLOT
