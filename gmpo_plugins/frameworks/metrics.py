"""Each trainer's own logged metrics in one vocabulary, one record per RL step.

    vocabulary       TRL (``trainer.state.log_history``, one entry per optimiser step)
    reward           reward
    policy_loss      policy_loss
    clip_frac_low    clip_ratio/low_mean
    clip_frac_high   clip_ratio/high_mean
    log_ratio_min    log_ratio_min
    log_ratio_max    log_ratio_max
    entropy          entropy
    kl               kl            (logged when beta != 0)
    grad_norm        grad_norm
    step_time        step_time     (seconds)

A metric a trainer did not log is absent from its record (never zero). TRL logs per
optimiser step; the RL step of optimiser step ``s`` (1-based) is
``(s - 1) // (optimiser steps per RL step * epochs_per_batch) + 1``, and an RL step's record
is the mean over its optimiser steps (the last one's ``step_time`` summed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

VOCABULARY = (
    "reward",
    "policy_loss",
    "clip_frac_low",
    "clip_frac_high",
    "log_ratio_min",
    "log_ratio_max",
    "entropy",
    "kl",
    "grad_norm",
    "step_time",
)
TRL_NAMES = {
    "reward": "reward",
    "policy_loss": "policy_loss",
    "clip_frac_low": "clip_ratio/low_mean",
    "clip_frac_high": "clip_ratio/high_mean",
    "log_ratio_min": "log_ratio_min",
    "log_ratio_max": "log_ratio_max",
    "entropy": "entropy",
    "kl": "kl",
    "grad_norm": "grad_norm",
    "step_time": "step_time",
}
SUMMED = ("step_time",)


def trl_records(log_history: Iterable[Mapping[str, Any]], optimiser_steps_per_rl_step: int) -> list[dict[str, float]]:
    """One vocabulary record per RL step from TRL's ``log_history`` (module docstring).

    Args:
        log_history: ``trainer.state.log_history``; entries without ``policy_loss`` (the
            end-of-training summary) are skipped.
        optimiser_steps_per_rl_step: optimiser steps per RL step, epochs included.

    Returns:
        Records in RL-step order, each with ``step`` (1-based) and the metrics TRL logged.
    """
    grouped: dict[int, list[Mapping[str, Any]]] = {}
    for entry in log_history:
        if "policy_loss" not in entry:
            continue
        rl_step = (int(entry["step"]) - 1) // optimiser_steps_per_rl_step + 1
        grouped.setdefault(rl_step, []).append(entry)
    records = []
    for rl_step in sorted(grouped):
        entries = grouped[rl_step]
        record: dict[str, float] = {"step": rl_step}
        for name in VOCABULARY:
            values = [float(entry[TRL_NAMES[name]]) for entry in entries if TRL_NAMES[name] in entry]
            if values:
                record[name] = sum(values) if name in SUMMED else sum(values) / len(values)
        records.append(record)
    return records
