"""Each trainer's own logged metrics in one vocabulary, one record per RL step.

    vocabulary      TRL (``log_history``,   verl (file logger, one       OpenRLHF (TensorBoard, one point
                    one entry per           JSON line per RL step)       per global step = RL step)
                    optimiser step)
    reward          reward                  critic/score/mean            train/rollout/reward_mean
    policy_loss     policy_loss             actor/pg_loss                train/policy_loss
    clip_frac_low   clip_ratio/low_mean     actor/gmpo/clip_frac_low     (not logged: train/ppo_clip_ratio,
    clip_frac_high  clip_ratio/high_mean    actor/gmpo/clip_frac_high    our adapter's, is both sides)
    log_ratio_min   log_ratio_min           actor/gmpo/log_ratio_min     (not logged)
    log_ratio_max   log_ratio_max           actor/gmpo/log_ratio_max     (not logged)
    entropy         entropy                 actor/entropy                (not logged: only with
                                                                         --actor.entropy_coef)
    kl              kl (when beta != 0)     actor/kl_loss (use_kl_loss)  train/kl (when kl_coef > 0)
    grad_norm       grad_norm               actor/grad_norm              train/actor_grad_norm
    step_time       step_time (seconds)     timing_s/step (seconds)      train/timing/step_total (seconds)
    peak_memory_gb  (not logged)            actor/perf/                  (not logged)
                                            max_memory_allocated_gb

A metric a trainer did not log is absent from its record (never zero). verl's memory figure
is dropped when verl ran on the CPU stand-ins, whose platform reports 0 for every memory
statistic (``verl_records(..., memory=False)``). TRL logs per optimiser step; the RL step of
optimiser step ``s`` (1-based) is ``(s - 1) // (optimiser steps per RL step * epochs_per_batch)
+ 1``, and an RL step's record is the mean over its optimiser steps (``step_time`` summed).

OpenRLHF's PPOTrainer logs once per global step, which is one rollout batch (one RL step),
under ``train/``: the mean over the step's micro-batches and epochs (token- or sample-weighted),
``actor_grad_norm`` of its last optimiser step, ``rollout/reward_mean`` the plain mean of the
reward function over the step's samples, and ``timing/step_total`` the sum of its generation,
experience, training and weight-broadcast times. It logs ``train/kl`` (0) without a reference
model too: that is left out unless the spec's ``kl_coef`` is positive
(``openrlhf_records(..., kl=False)``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
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
    "peak_memory_gb",
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
VERL_NAMES = {
    "reward": "critic/score/mean",
    "policy_loss": "actor/pg_loss",
    "clip_frac_low": "actor/gmpo/clip_frac_low",
    "clip_frac_high": "actor/gmpo/clip_frac_high",
    "log_ratio_min": "actor/gmpo/log_ratio_min",
    "log_ratio_max": "actor/gmpo/log_ratio_max",
    "entropy": "actor/entropy",
    "kl": "actor/kl_loss",
    "grad_norm": "actor/grad_norm",
    "step_time": "timing_s/step",
    "peak_memory_gb": "actor/perf/max_memory_allocated_gb",
}
OPENRLHF_NAMES = {
    "reward": "train/rollout/reward_mean",
    "policy_loss": "train/policy_loss",
    "kl": "train/kl",
    "grad_norm": "train/actor_grad_norm",
    "step_time": "train/timing/step_total",
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
            if name not in TRL_NAMES:
                continue
            values = [float(entry[TRL_NAMES[name]]) for entry in entries if TRL_NAMES[name] in entry]
            if values:
                record[name] = sum(values) if name in SUMMED else sum(values) / len(values)
        records.append(record)
    return records


def verl_records(lines: Iterable[str], memory: bool = True) -> list[dict[str, float]]:
    """One vocabulary record per RL step from verl's file logger (module docstring).

    Args:
        lines: the lines of verl's ``VERL_FILE_LOGGER_PATH`` file, one JSON object
            ``{"step": N, "data": {metric: value}}`` per RL step (blank lines skipped).
        memory: False when verl's platform reports no memory figures (CPU stand-ins):
            ``peak_memory_gb`` is then left out instead of reported as 0.

    Returns:
        Records in RL-step order, each with ``step`` and the metrics verl logged.
    """
    by_step: dict[int, dict[str, Any]] = {}
    for line in lines:
        if line.strip():
            entry = json.loads(line)
            by_step[int(entry["step"])] = entry["data"]
    records = []
    for step in sorted(by_step):
        data = by_step[step]
        record: dict[str, float] = {"step": step}
        for name, key in VERL_NAMES.items():
            if key in data and (memory or name != "peak_memory_gb"):
                record[name] = float(data[key])
        records.append(record)
    return records


def openrlhf_records(scalars: Mapping[str, Sequence[Sequence[float]]], kl: bool = True) -> list[dict[str, float]]:
    """One vocabulary record per RL step from OpenRLHF's TensorBoard scalars (module docstring).

    Args:
        scalars: ``{tag: [(global step, value), ...]}`` as ``gmpo_plugins.frameworks.scalars``
            reads them; a step logged twice keeps its last value.
        kl: False when the run had no reference model (``kl_coef`` 0): ``train/kl`` is then left out.

    Returns:
        Records in RL-step order, one per global step OpenRLHF logged ``train/policy_loss`` for,
        each with ``step`` and the metrics OpenRLHF logged.
    """
    by_tag = {tag: {int(step): float(value) for step, value in points} for tag, points in scalars.items()}
    records = []
    for step in sorted(by_tag.get(OPENRLHF_NAMES["policy_loss"], {})):
        record: dict[str, float] = {"step": step}
        for name, tag in OPENRLHF_NAMES.items():
            if step in by_tag.get(tag, {}) and (kl or name != "kl"):
                record[name] = by_tag[tag][step]
        records.append(record)
    return records
