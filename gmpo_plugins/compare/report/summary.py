"""Per-run summaries of ``gmpo-plugins compare`` and their means over seeds.

One run is one (framework, loss, seed); its records are the step-0 evaluation record and
one record per RL step. Summary of a run:

    reward_final        mean training reward of the last min(5, steps) steps
    heldout_greedy      held-out greedy exact match at the last evaluation (the last step)
    heldout_pass        held-out sampled pass rate at the last evaluation
    heldout_best        best held-out greedy exact match over all evaluations (step 0 included)
    heldout_drop        heldout_best - heldout_greedy (>= 0): how far it fell from its best
    ratio_width         mean over steps of the 1-99% width of the token log ratio
                        log(pi_after/pi_old) after the step's updates (trainer-measured)
    max_abs_log_ratio   max over the run of |log ratio| seen by the loss path
    entropy, kl_init    mean of the last min(5, steps) steps (per valid token, exact)
    clip_low, clip_high mean over steps of the clipped-token fractions (None if not reported)
    wall_s              wall time of the run (warm-up excluded)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gmpo_plugins.compare.report.stats import Estimate, mean_interval

FINAL_WINDOW = 5
METRICS = (
    "reward_final",
    "heldout_greedy",
    "heldout_pass",
    "heldout_best",
    "heldout_drop",
    "ratio_width",
    "max_abs_log_ratio",
    "entropy",
    "kl_init",
    "clip_low",
    "clip_high",
    "wall_s",
)

RunKey = tuple[str, str, int]  # (framework, loss, seed)


def group_runs(records: Iterable[dict[str, Any]]) -> dict[RunKey, list[dict[str, Any]]]:
    """Records by (framework, loss, seed), in the order the runs appear."""
    runs: dict[RunKey, list[dict[str, Any]]] = {}
    for record in records:
        runs.setdefault((record["framework"], record["loss_name"], record["seed"]), []).append(record)
    return runs


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise_run(records: list[dict[str, Any]]) -> dict[str, float | None]:
    """The summary of one run (module docstring) from its records."""
    steps = [r for r in records if r["step"] > 0]
    last = steps[-FINAL_WINDOW:]
    evals = [r for r in records if "heldout_greedy" in r]

    def values(rows: list[dict[str, Any]], key: str) -> list[float]:
        return [r[key] for r in rows if r.get(key) is not None]

    widths = [r["post_log_ratio_q99"] - r["post_log_ratio_q01"] for r in steps if "post_log_ratio_q99" in r]
    extremes = [abs(r[key]) for r in steps for key in ("log_ratio_min", "log_ratio_max") if r.get(key) is not None]
    best = max(values(evals, "heldout_greedy")) if evals else None
    final = evals[-1]["heldout_greedy"] if evals else None
    return {
        "reward_final": _mean(values(last, "reward")),
        "heldout_greedy": final,
        "heldout_pass": evals[-1]["heldout_pass"] if evals else None,
        "heldout_best": best,
        "heldout_drop": None if best is None or final is None else best - final,
        "ratio_width": _mean(widths),
        "max_abs_log_ratio": max(extremes) if extremes else None,
        "entropy": _mean(values(last, "entropy")),
        "kl_init": _mean(values(last, "kl_init")),
        "clip_low": _mean(values(steps, "clip_frac_low")),
        "clip_high": _mean(values(steps, "clip_frac_high")),
        "wall_s": steps[-1].get("elapsed_s") if steps else None,
    }


def per_seed(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[int, dict[str, float | None]]]:
    """{(framework, loss): {seed: run summary}}, in the order the runs appear."""
    out: dict[tuple[str, str], dict[int, dict[str, float | None]]] = {}
    for (framework, loss, seed), rows in group_runs(records).items():
        out.setdefault((framework, loss), {})[seed] = summarise_run(rows)
    return out


def over_seeds(runs: dict[int, dict[str, float | None]]) -> dict[str, Estimate | None]:
    """Mean and 95% t interval over seeds of each metric (None where no seed has it)."""
    out: dict[str, Estimate | None] = {}
    for key in METRICS:
        values = [value for summary in runs.values() if (value := summary[key]) is not None]
        out[key] = mean_interval(values) if values else None
    return out
