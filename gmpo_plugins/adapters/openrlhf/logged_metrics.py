"""The registry loss's metrics into OpenRLHF's own logger, as ``gmpo/<core key>``.

OpenRLHF 0.11's ``ActorPPOTrainer.training_step`` keeps only ``clip_ratio`` and ``ppo_kl`` of the
5-tuple its ``PolicyLoss`` returns, and returns ``{"metrics": {name: value}, "weights": {name:
"token" | "sample" | None}, "num_samples", "num_action_tokens"}``. Its ``ppo_train`` reduces each
weighted entry over micro-batches, ranks and the RL step's optimiser steps, and the driver logs the
result as ``train/<name>`` (TensorBoard, wandb). This module wraps both methods. While
``training_step`` runs, the patched PolicyLoss hands its ``LossOutput.metrics`` to ``keep``;
afterwards every key k of the last call except ``policy_loss`` (which OpenRLHF logs itself) is
added to the returned dicts as ``gmpo/k``, and ``ppo_train`` replaces the entries a weighted mean
cannot give by their exact values over the RL step:

    key                                   train/gmpo/k (j: the RL step's micro-batches on every rank)
    log_ratio_min, seq_weight_min         min_j v_j
    log_ratio_max, seq_weight_max         max_j v_j
    nonfinite_tokens                      sum_j v_j (a token counts again in each epoch)
    seq_weight_mean                       sum_j n_j v_j / sum_j n_j,  n_j = rows (OpenRLHF's "sample")
    every other key (clip_frac_low,       sum_j t_j v_j / sum_j t_j,  t_j = valid tokens
      clip_frac_high, clip_frac_dual,     (OpenRLHF's "token" weight: exact for fractions and means)
      clip_frac, ppo_kl)

The values stay 0-dim tensors until ``ppo_train`` reads them (OpenRLHF reads its own with one
``.item()`` each per micro-batch; the exact entries are reduced once per RL step: a min, max or
sum on each rank, then one ``all_reduce`` each across ranks through OpenRLHF's strategy; a
micro-batch without a valid token, whose extrema are the core's 0, is left out of them, as OpenRLHF's
weights leave it out of the means). The
``gmpo-plugins frameworks`` report reads them from OpenRLHF's TensorBoard log.

Only a ``training_step`` or ``ppo_train`` in which a registry loss ran is changed; with ppo/gspo
they return OpenRLHF's result untouched. When a registry loss ran and the result is not the dict
shape above, or ``self.actor_loss_fn`` is a registry loss that ``training_step`` did not call, it
raises ``UpstreamDriftError``.
"""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import torch

from gmpo_plugins.adapters.openrlhf.plan_attribute import registry_plan
from gmpo_plugins.adapters.upstream import UpstreamDriftError, framework_version

PREFIX = "gmpo/"
LOGGED_BY_OPENRLHF = frozenset({"policy_loss"})
SAMPLE_WEIGHTED = frozenset({"seq_weight_mean", "seq_weight_min", "seq_weight_max"})
EXACT = {
    "log_ratio_min": "min",
    "seq_weight_min": "min",
    "log_ratio_max": "max",
    "seq_weight_max": "max",
    "nonfinite_tokens": "sum",
}
"""The keys ``ppo_train`` logs exactly over the RL step, and how (module docstring)."""
_PATCHED = "__gmpo_plugins_logged_metrics__"
_kept: contextvars.ContextVar[list[Mapping[str, Any]] | None] = contextvars.ContextVar("gmpo_openrlhf_kept")
_step: contextvars.ContextVar[list[Mapping[str, Any]] | None] = contextvars.ContextVar("gmpo_openrlhf_step")
"""The metrics of the RL step's micro-batches that hold a valid token (``logging_ppo_train``)."""


def weight(key: str) -> str:
    """OpenRLHF's weight for the core metric ``key``: "sample" for per-sequence ones, else "token"."""
    return "sample" if key in SAMPLE_WEIGHTED else "token"


def keep(metrics: Mapping[str, Any]) -> None:
    """Hand a micro-batch's ``LossOutput.metrics`` to the ``training_step`` running now (if any)."""
    kept = _kept.get(None)
    if kept is not None:
        kept.append(metrics)


def with_loss_metrics(status: Any, metrics: Mapping[str, Any]) -> Any:
    """``status`` (what ``training_step`` returned) with ``gmpo/k`` added to its ``metrics`` and
    ``weights`` for every key k of ``metrics``; UpstreamDriftError when ``status`` is not OpenRLHF
    0.11's dict or already holds such a name."""
    logged = status.get("metrics") if isinstance(status, dict) else None
    weights = status.get("weights") if isinstance(status, dict) else None
    if not isinstance(logged, dict) or not isinstance(weights, dict):
        raise UpstreamDriftError(
            f"gmpo_plugins: {framework_version('openrlhf')}: ActorPPOTrainer.training_step returned "
            f"{type(status).__name__} {sorted(status) if isinstance(status, dict) else ''}, not the "
            "{'metrics': dict, 'weights': dict, ...} that carries the registry loss's metrics to "
            "OpenRLHF's logger (openrlhf>=0.11.2,<0.12 returns it)"
        )
    for key, value in metrics.items():
        if key in LOGGED_BY_OPENRLHF:
            continue
        name = PREFIX + key
        if name in logged:
            raise UpstreamDriftError(
                f"gmpo_plugins: {framework_version('openrlhf')}: training_step already logs {name!r}; "
                "the registry loss's metric of that name would replace it"
            )
        logged[name] = value.detach() if hasattr(value, "detach") else value
        weights[name] = weight(key)
    return status


def logging_training_step(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ActorPPOTrainer.training_step`` that adds the registry loss's metrics (module docstring)."""

    @functools.wraps(original)
    def training_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _kept.set([])
        try:
            status = original(self, *args, **kwargs)
            kept = _kept.get()
        finally:
            _kept.reset(token)
        if kept:
            step = _step.get(None)
            if step is not None and _has_tokens(status):
                step.append(kept[-1])
            return with_loss_metrics(status, kept[-1])
        if registry_plan(getattr(self, "actor_loss_fn", None)) is not None:
            raise UpstreamDriftError(
                f"gmpo_plugins: {framework_version('openrlhf')}: ActorPPOTrainer.training_step did not call "
                "its actor_loss_fn, the registry loss; its metrics cannot reach OpenRLHF's logger"
            )
        return status

    setattr(training_step, _PATCHED, True)
    return training_step


def _has_tokens(status: Any) -> bool:
    """Whether the micro-batch of ``training_step``'s ``status`` held a valid token (the core's
    extrema of one without are 0, which must not enter the step's extrema)."""
    tokens = status.get("num_action_tokens", 1) if isinstance(status, dict) else 1
    return float(tokens) > 0


NEUTRAL = {"min": math.inf, "max": -math.inf, "sum": 0.0}
"""What a rank without a valid token in the RL step offers each reduction."""


def exact_over_ranks(step: list[Mapping[str, Any]], strategy: Any) -> dict[str, float]:
    """The ``EXACT`` entries of an RL step: each key's min, max or sum over this rank's micro-batch
    metrics ``step``, then over the ranks through ``strategy.all_reduce`` (OpenRLHF's, which knows
    "max" and "sum": a minimum is minus the maximum of the negated values). Every rank reduces every
    key (the same collectives on each), offering ``NEUTRAL`` where its micro-batches have none; a
    key no rank had is left out."""
    local: dict[str, dict[str, float]] = {how: {} for how in NEUTRAL}
    for key, how in EXACT.items():
        local[how][key] = _reduce(
            [torch.as_tensor(metrics[key]).detach().float().cpu() for metrics in step if key in metrics], how
        )
    found = strategy.all_reduce({key: float(any(key in metrics for metrics in step)) for key in EXACT}, op="max")
    exact = {
        **strategy.all_reduce(local["max"], op="max"),
        **{k: -v for k, v in strategy.all_reduce({k: -v for k, v in local["min"].items()}, op="max").items()},
        **strategy.all_reduce(local["sum"], op="sum"),
    }
    return {key: value for key, value in exact.items() if found[key] > 0}


def _reduce(values: list[torch.Tensor], how: str) -> float:
    """The min, max or sum (``how``) of 0-dim ``values``; ``NEUTRAL[how]`` for none."""
    if not values:
        return NEUTRAL[how]
    stacked = torch.stack(values)
    if how == "sum":
        return float(stacked.sum())
    return float(stacked.amax() if how == "max" else stacked.amin())


def logging_ppo_train(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ActorPPOTrainer.ppo_train`` whose result holds the ``EXACT`` entries (module docstring)."""

    @functools.wraps(original)
    def ppo_train(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _step.set([])
        try:
            status = original(self, *args, **kwargs)
            step = _step.get()
        finally:
            _step.reset(token)
        if step is not None and registry_plan(getattr(self, "actor_loss_fn", None)) is not None:
            status.update({PREFIX + key: value for key, value in exact_over_ranks(step, self.strategy).items()})
        return status

    setattr(ppo_train, _PATCHED, True)
    return ppo_train


def patch_trainer(module: ModuleType) -> None:
    """Wrap ``module.ActorPPOTrainer.training_step`` and ``ppo_train`` (``openrlhf.trainer.ray.ppo_actor``)
    by ``logging_training_step`` and ``logging_ppo_train``; idempotent. A module without those
    methods is left alone."""
    trainer = getattr(module, "ActorPPOTrainer", None)
    for name, wrap in (("training_step", logging_training_step), ("ppo_train", logging_ppo_train)):
        original = getattr(trainer, name, None)
        if trainer is not None and original is not None and not getattr(original, _PATCHED, False):
            setattr(trainer, name, wrap(original))
