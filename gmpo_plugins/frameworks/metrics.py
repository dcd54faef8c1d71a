"""Each trainer's own logged metrics in one vocabulary, one record per RL step.

    vocabulary      TRL (``log_history``,   verl (file logger, one       OpenRLHF (TensorBoard, one point
                    one entry per           JSON line per RL step)       per global step = RL step)
                    optimiser step)
    reward          reward                  critic/score/mean            train/rollout/reward_mean
    policy_loss     policy_loss             actor/pg_loss                train/policy_loss
    clip_frac_low   clip_ratio/low_mean     actor/gmpo/clip_frac_low     train/gmpo/clip_frac_low
    clip_frac_high  clip_ratio/high_mean    actor/gmpo/clip_frac_high    train/gmpo/clip_frac_high
    clip_frac_dual  clip_ratio/dual_mean    actor/gmpo/clip_frac_dual    train/gmpo/clip_frac_dual
    log_ratio_min   log_ratio_min           actor/gmpo/log_ratio_min     train/gmpo/log_ratio_min
    log_ratio_max   log_ratio_max           actor/gmpo/log_ratio_max     train/gmpo/log_ratio_max
    entropy         entropy                 actor/entropy                (not logged: only with
                                                                         --actor.entropy_coef)
    kl              kl (when beta != 0)     actor/kl_loss (use_kl_loss)  train/kl (when kl_coef > 0)
    grad_norm       grad_norm               actor/grad_norm              train/actor_grad_norm (one
                                                                         optimiser step per RL step)
    step_time       step_time (seconds)     timing_s/step (seconds)      train/timing/step_total (seconds)
    peak_memory_gb  (not logged)            actor/perf/                  (not logged)
                                            max_memory_allocated_gb

    vocabulary      SkyRL (its tracker's payload, one per RL step; ``examples/skyrl_cpu`` records it in
                    ``metrics.json``)
    reward          reward/avg_raw_reward
    policy_loss     policy/policy_loss
    clip_frac_low   policy/loss_metrics/gmpo/clip_frac_low
    clip_frac_high  policy/loss_metrics/gmpo/clip_frac_high
    clip_frac_dual  policy/loss_metrics/gmpo/clip_frac_dual
    log_ratio_min   policy/loss_metrics/gmpo/log_ratio_min
    log_ratio_max   policy/loss_metrics/gmpo/log_ratio_max
    entropy         policy/policy_entropy
    kl              policy/policy_kl (use_kl_loss)
    grad_norm       policy/grad_norm
    step_time       timing/step (seconds)
    peak_memory_gb  (not logged)

One aggregation across the optimiser steps (and micro-batches) of an RL step, for every trainer
(``AGGREGATION``, ``aggregate``): ``log_ratio_min`` the minimum of the minima, ``log_ratio_max``
the maximum of the maxima, ``step_time`` the sum, every other metric the mean weighted by the
count it was taken over. What each trainer gives to aggregate:

- TRL logs one entry per optimiser step (its own mean over the step's micro-batches; minima and
  maxima over processes) and no counts: the reader aggregates the entries of an RL step, each
  weighing the same (every optimiser step holds ``mini_batch_size`` responses: a mean weighted
  by responses). The RL step of optimiser step ``s`` (1-based) is ``(s - 1) // k + 1`` with
  ``k`` the optimiser steps per RL step, epochs included.
- verl aggregates itself before it logs: a mean over the micro-batches of each optimiser step
  (of their minima and maxima too: ``verl.utils.metric.Metric``), then over the optimiser steps
  the minimum of keys with ``min`` in their name, the maximum of those with ``max``, the mean
  of the others (``reduce_metrics``). With one micro-batch per optimiser step that is this
  aggregation, responses-weighted; with several, verl's ``log_ratio_min`` is a mean of minima.
- SkyRL aggregates itself before it logs (``reduce_metrics``): over the micro-batches of an
  optimiser step the plain mean (a sum for names ending in ``loss``), over the optimiser steps
  (mini-batches and epochs) the plain mean; at both levels the minimum of keys ending in
  ``_min`` and the maximum of those ending in ``_max``. Every optimiser step holds
  ``mini_batch_size`` responses, so with one micro-batch per optimiser step that is this
  aggregation, responses-weighted, as for verl.
- OpenRLHF logs once per RL step under ``train/``: means over the step's micro-batches and
  epochs weighted by tokens (``policy_loss``) or samples, ``actor_grad_norm`` of its last
  optimiser step (read only when an RL step is one optimiser step: otherwise it is no mean over
  the step's optimiser steps, as the others' is, and is left out: ``optimiser_steps``),
  ``rollout/reward_mean`` the plain mean of the reward over the step's samples,
  ``timing/step_total`` the sum of its generation, experience, training and weight-broadcast
  times. The adapter adds the loss's metrics to OpenRLHF's log as ``train/gmpo/<key>``: the
  fractions reduced by OpenRLHF's token-weighted means over the RL step's micro-batches of every
  rank, the extrema exact (the minimum of the minima, the maximum of the maxima:
  ``gmpo_plugins.adapters.openrlhf.logged_metrics``), so they are this aggregation.
  OpenRLHF logs ``train/kl`` (0) without a reference model too: that is left out unless the
  spec's ``kl_coef`` is positive (``openrlhf_records(..., kl=False)``).

``entropy`` is not the same quantity in verl and TRL once an RL step has several optimiser
steps: verl logs the entropy its old-log-prob pass computed (the rollout policy's, before the
step's updates), TRL the mean over its optimiser steps of the policy being trained.

A metric a trainer did not log is absent from its record (never zero). verl's memory figure
is dropped when verl ran on the CPU stand-ins, whose platform reports 0 for every memory
statistic (``verl_records(..., memory=False)``).
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
    "clip_frac_dual",
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
    "clip_frac_dual": "clip_ratio/dual_mean",
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
    "clip_frac_dual": "actor/gmpo/clip_frac_dual",
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
    "clip_frac_low": "train/gmpo/clip_frac_low",
    "clip_frac_high": "train/gmpo/clip_frac_high",
    "clip_frac_dual": "train/gmpo/clip_frac_dual",
    "log_ratio_min": "train/gmpo/log_ratio_min",
    "log_ratio_max": "train/gmpo/log_ratio_max",
    "kl": "train/kl",
    "grad_norm": "train/actor_grad_norm",
    "step_time": "train/timing/step_total",
}
SKYRL_NAMES = {
    "reward": "reward/avg_raw_reward",
    "policy_loss": "policy/policy_loss",
    "clip_frac_low": "policy/loss_metrics/gmpo/clip_frac_low",
    "clip_frac_high": "policy/loss_metrics/gmpo/clip_frac_high",
    "clip_frac_dual": "policy/loss_metrics/gmpo/clip_frac_dual",
    "log_ratio_min": "policy/loss_metrics/gmpo/log_ratio_min",
    "log_ratio_max": "policy/loss_metrics/gmpo/log_ratio_max",
    "entropy": "policy/policy_entropy",
    "kl": "policy/policy_kl",
    "grad_norm": "policy/grad_norm",
    "step_time": "timing/step",
}
AGGREGATION = {"log_ratio_min": "min", "log_ratio_max": "max", "step_time": "sum"}  # others: "mean"


def aggregate(parts: Sequence[tuple[Mapping[str, float], float]]) -> dict[str, float]:
    """One RL step's value of every metric from its parts (optimiser steps or micro-batches).

    Args:
        parts: ``(values, count)`` per part, ``values`` by vocabulary name; ``count`` the items
            (tokens or responses) the part's means were taken over, > 0.

    Returns:
        For each name some part has: the minimum (``AGGREGATION`` "min"), maximum ("max") or sum
        ("sum") over the parts that have it, else ``sum_p count_p * value_p / sum_p count_p``
        over those parts.
    """
    names = list(dict.fromkeys(k for values, _ in parts for k in values))
    out: dict[str, float] = {}
    for name in names:
        have = [(float(values[name]), count) for values, count in parts if name in values]
        rule = AGGREGATION.get(name, "mean")
        if rule == "min":
            out[name] = min(value for value, _ in have)
        elif rule == "max":
            out[name] = max(value for value, _ in have)
        elif rule == "sum":
            out[name] = sum(value for value, _ in have)
        else:
            out[name] = sum(value * count for value, count in have) / sum(count for _, count in have)
    return out


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
        parts = [
            ({name: float(entry[key]) for name, key in TRL_NAMES.items() if key in entry}, 1.0)
            for entry in grouped[rl_step]
        ]
        records.append({"step": rl_step, **ordered(aggregate(parts))})
    return records


def ordered(values: Mapping[str, float]) -> dict[str, float]:
    """``values`` in ``VOCABULARY`` order."""
    return {name: values[name] for name in VOCABULARY if name in values}


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


def openrlhf_records(
    scalars: Mapping[str, Sequence[Sequence[float]]],
    kl: bool = True,
    optimiser_steps: int = 1,
) -> list[dict[str, float]]:
    """One vocabulary record per RL step from OpenRLHF's TensorBoard scalars (module docstring).

    Args:
        scalars: ``{tag: [(global step, value), ...]}`` as ``gmpo_plugins.frameworks.scalars``
            reads them; a step logged twice keeps its last value.
        kl: False when the run had no reference model (``kl_coef`` 0): ``train/kl`` is then left out.
        optimiser_steps: optimiser steps per RL step (mini-batches times epochs); above 1,
            ``train/actor_grad_norm`` (the last optimiser step's) is left out.

    Returns:
        Records in RL-step order, one per global step OpenRLHF logged ``train/policy_loss`` for,
        each with ``step`` and the metrics OpenRLHF logged.
    """
    by_tag = {tag: {int(step): float(value) for step, value in points} for tag, points in scalars.items()}
    records = []
    for step in sorted(by_tag.get(OPENRLHF_NAMES["policy_loss"], {})):
        record: dict[str, float] = {"step": step}
        for name, tag in OPENRLHF_NAMES.items():
            if name == "grad_norm" and optimiser_steps > 1:
                continue
            if step in by_tag.get(tag, {}) and (kl or name != "kl"):
                record[name] = by_tag[tag][step]
        records.append({"step": step, **ordered(record)})
    return records


def skyrl_records(metrics: Mapping[str, Any]) -> list[dict[str, float]]:
    """One vocabulary record per RL step from what SkyRL logged (module docstring).

    Args:
        metrics: ``examples/skyrl_cpu``'s ``metrics.json``: ``{"steps": {"N": {metric: value}}}``,
            each step's payload as SkyRL's trainer handed it to its tracker.

    Returns:
        Records in RL-step order, each with ``step`` and the metrics SkyRL logged; ValueError
        for a step that is not a whole number or a value that is no number.
    """
    records = []
    for key in sorted(metrics["steps"], key=int):
        data = metrics["steps"][key]
        record: dict[str, float] = {"step": int(key)}
        for name, tag in SKYRL_NAMES.items():
            if tag in data:
                record[name] = float(data[tag])
        records.append(record)
    return records
