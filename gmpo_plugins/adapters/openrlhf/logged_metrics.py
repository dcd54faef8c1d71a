"""The registry loss's metrics into OpenRLHF's own logger, as ``gmpo/<core key>``.

OpenRLHF 0.11's ``ActorPPOTrainer.training_step`` keeps only ``clip_ratio`` and ``ppo_kl`` of the
5-tuple its ``PolicyLoss`` returns, and returns ``{"metrics": {name: value}, "weights": {name:
"token" | "sample" | None}, "num_samples", "num_action_tokens"}``. Its ``ppo_train`` reduces each
weighted entry over micro-batches, ranks and the RL step's optimiser steps, and the driver logs the
result as ``train/<name>`` (TensorBoard, wandb). This module wraps ``training_step`` (not
``ppo_train``): while it runs, the patched PolicyLoss hands its ``LossOutput.metrics`` to ``keep``;
afterwards every key k of the last call except ``policy_loss`` (which OpenRLHF logs itself) is
added to the returned dicts as ``gmpo/k``:

    key                                   weight     train/gmpo/k after ppo_train
    seq_weight_mean, seq_weight_min/max   "sample"   sum_j n_j v_j / sum_j n_j,  n_j = rows (responses)
    every other key (clip_frac_low,       "token"    sum_j t_j v_j / sum_j t_j,  t_j = valid tokens
      clip_frac_high, clip_frac, ppo_kl,
      log_ratio_min/max, nonfinite_tokens)

with j over the RL step's micro-batches on every rank (OpenRLHF's own reduction; the values stay
0-dim tensors, which ``ppo_train`` reads with one ``.item()`` each as it does its own). A weighted
mean is exact for the fractions and means. It is not for extrema and counts: ``gmpo/log_ratio_min``
is the token-weighted mean of the micro-batches' minima (not the minimum), ``gmpo/seq_weight_max``
the response-weighted mean of their maxima, ``gmpo/nonfinite_tokens`` the token-weighted mean of
their counts (above 0 whenever one was seen). The exact values, per micro-batch with its counts,
are in the side file (``metrics_file``, ``GMPO_PLUGINS_OPENRLHF_METRICS``), which the
``gmpo-plugins frameworks`` report reads.

Only a ``training_step`` in which a registry loss ran is changed; with ppo/gspo it returns
OpenRLHF's result untouched. When a registry loss ran and the result is not the dict shape above,
or ``self.actor_loss_fn`` is a registry loss that ``training_step`` did not call, it raises
``UpstreamDriftError``.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from gmpo_plugins.adapters.openrlhf.plan_attribute import registry_plan
from gmpo_plugins.adapters.upstream import UpstreamDriftError, framework_version

PREFIX = "gmpo/"
LOGGED_BY_OPENRLHF = frozenset({"policy_loss"})
SAMPLE_WEIGHTED = frozenset({"seq_weight_mean", "seq_weight_min", "seq_weight_max"})
_PATCHED = "__gmpo_plugins_logged_metrics__"
_kept: contextvars.ContextVar[list[Mapping[str, Any]] | None] = contextvars.ContextVar("gmpo_openrlhf_kept")


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
            return with_loss_metrics(status, kept[-1])
        if registry_plan(getattr(self, "actor_loss_fn", None)) is not None:
            raise UpstreamDriftError(
                f"gmpo_plugins: {framework_version('openrlhf')}: ActorPPOTrainer.training_step did not call "
                "its actor_loss_fn, the registry loss; its metrics cannot reach OpenRLHF's logger"
            )
        return status

    setattr(training_step, _PATCHED, True)
    return training_step


def patch_training_step(module: ModuleType) -> None:
    """Wrap ``module.ActorPPOTrainer.training_step`` (``openrlhf.trainer.ray.ppo_actor``) by
    ``logging_training_step``; idempotent. A module without that method is left alone."""
    trainer = getattr(module, "ActorPPOTrainer", None)
    original = getattr(trainer, "training_step", None)
    if trainer is None or original is None or getattr(original, _PATCHED, False):
        return
    trainer.training_step = logging_training_step(original)
