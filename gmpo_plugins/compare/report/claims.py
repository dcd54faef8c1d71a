"""The GMPO paper's claims checked on a compare run, paired differences between losses, and
the paper's ablation table (Table 3) next to the toy's.

Claims (arXiv 2507.20673), each as a paired difference gmpo - comparator over seeds (same
framework, same seed: same initial model and first rollout) with the sign the paper claims.
Comparators (``COMPARATORS``), each that ran gets its own rows:

    grpo_clip_wider   GRPO with its ratio clipped to GMPO's band (e^-0.4, e^0.4): the paper's
                      comparison (Figure 1; the authors' ``grpo_clip_wider``)
    grpo              GRPO at its standard clip 0.8..1.2 (a narrower per-token band than GMPO's)

Claims:

    narrower ratio range   ratio_width (1-99% token log-ratio width)   claimed sign -1
    narrower ratio range   max_abs_log_ratio (max |log ratio|)         claimed sign -1
    higher entropy         entropy at the end of the run               claimed sign +1
    lower KL               kl_init (KL to the initial policy) at the end   claimed sign -1
    no late collapse       heldout_drop (best - final held-out greedy)  claimed sign -1

The verdict (``stats.verdict``) is supported / contradicted / inconclusive from the 95% t
interval of the difference.

Paper Table 3 (Qwen2.5-Math-7B, average pass@1 over AIME24, AMC, MATH500, Minerva,
OlympiadBench; from the project's reference notes): GMPO (token clip) 52.7, no clip 52.3,
sequence-level clip 52.6, no 1/|o| normalisation 52.0; GRPO 51.2 (Table 1, same model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gmpo_plugins.compare.report.stats import PairedDifference, paired_difference, verdict

CLAIMS = (
    ("narrower importance-ratio range", "ratio_width", "1-99% token log-ratio width", -1),
    ("narrower importance-ratio range", "max_abs_log_ratio", "max |log ratio|", -1),
    ("higher entropy", "entropy", "entropy per token, last 5 steps", +1),
    ("lower KL to the initial policy", "kl_init", "KL(policy || initial) per token, last 5 steps", -1),
    ("no late collapse", "heldout_drop", "drop of held-out greedy accuracy from its best", -1),
)
COMPARATORS = (
    ("grpo_clip_wider", "GRPO, ratio clip e^-0.4..e^0.4 (GMPO's band; the paper's comparison)"),
    ("grpo", "GRPO, standard ratio clip 0.8..1.2"),
)
PAIRED_METRICS = (
    ("heldout_greedy", "held-out greedy exact match (final)"),
    ("heldout_pass", "held-out sampled pass rate (final)"),
    ("reward_final", "training reward (last 5 steps)"),
)
PAPER_TABLE3 = {
    "gmpo": ("GMPO (token-level clip)", 52.7),
    "gmpo_noclip": ("without clipping", 52.3),
    "gmpo_seqclip": ("sequence-level clip", 52.6),
    "gmpo_nonorm": ("without 1/|o| normalisation", 52.0),
    "grpo": ("GRPO (Table 1)", 51.2),
}
PAPER_SOURCE = "paper: Qwen2.5-Math-7B, avg pass@1 of 5 math benchmarks (Table 3; GRPO from Table 1)"


@dataclass(frozen=True)
class Comparison:
    """``a - b`` of one metric over the seeds both runs share."""

    framework: str
    a: str
    b: str
    metric: str
    label: str
    difference: PairedDifference
    claimed_sign: int = 0  # 0: not a claim

    @property
    def verdict(self) -> str:
        return verdict(self.difference.estimate, self.claimed_sign)


def _paired(
    runs: dict[tuple[str, str], dict[int, dict[str, float | None]]], framework: str, a: str, b: str, metric: str
) -> PairedDifference | None:
    left, right = runs.get((framework, a), {}), runs.get((framework, b), {})
    pairs = [
        (x, y)
        for s in left
        if s in right and (x := left[s][metric]) is not None and (y := right[s][metric]) is not None
    ]
    if not pairs:
        return None
    return paired_difference([x for x, _ in pairs], [y for _, y in pairs])


def claim_rows(runs: dict[tuple[str, str], dict[int, dict[str, float | None]]]) -> list[Comparison]:
    """One row per framework, comparator (``COMPARATORS``, in that order) and claim, where
    the framework ran both gmpo and that comparator."""
    rows = []
    for framework in dict.fromkeys(f for f, _ in runs):
        for comparator, _ in COMPARATORS:
            for claim, metric, _, sign in CLAIMS:
                difference = _paired(runs, framework, "gmpo", comparator, metric)
                if difference is not None:
                    rows.append(Comparison(framework, "gmpo", comparator, metric, claim, difference, sign))
    return rows


def comparator_label(loss: str) -> str:
    """What a claim row's comparator is (``COMPARATORS``), or the loss name."""
    return dict(COMPARATORS).get(loss, loss)


def paired_rows(runs: dict[tuple[str, str], dict[int, dict[str, float | None]]], losses: list[str]) -> list[Comparison]:
    """The first requested loss against each other one, per framework, on ``PAIRED_METRICS``."""
    rows = []
    for framework in dict.fromkeys(f for f, _ in runs):
        for other in losses[1:]:
            for metric, label in PAIRED_METRICS:
                difference = _paired(runs, framework, losses[0], other, metric)
                if difference is not None:
                    rows.append(Comparison(framework, losses[0], other, metric, label, difference))
    return rows


def paper_value(loss: str) -> tuple[str, float | None]:
    """(the paper's name for the variant, its Table 3 number) or (the loss name, None)."""
    return PAPER_TABLE3.get(loss, (loss, None))


def claim_summary(row: Comparison) -> dict[str, Any]:
    """A claim row as plain values (for tests and JSON)."""
    return {
        "framework": row.framework,
        "comparator": row.b,
        "claim": row.label,
        "metric": row.metric,
        "difference": row.difference.estimate.mean,
        "half_width": row.difference.estimate.half_width,
        "verdict": row.verdict,
    }
