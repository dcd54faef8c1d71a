"""verl actor config -> registry-loss hyper-parameters and ``BatchInfo`` (no verl import).

verl calls a policy loss with the actor config (``config``, e.g. ``FSDPActorConfig``) and
``loss_agg_mode`` (= ``config.loss_agg_mode``). Its dataclasses reject unknown keys, so
only existing fields can carry our hyper-parameters. Translation, for each loss that
declares the hyper-parameter in its spec (``spec.defaults``):

    eps_low     <- actor_rollout_ref.actor.clip_ratio_low   (or clip_ratio when null)
    eps_high    <- actor_rollout_ref.actor.clip_ratio_high  (or clip_ratio when null)
                   log space for clip_space "log" (gmpo family: ratio kept in
                   (e^-eps_low, e^eps_high), paper value 0.4), ratio space for "ratio"
                   (grpo/dapo/dr_grpo/gspo: [1 - eps_low, 1 + eps_high], as verl's vanilla)
    dual_clip   <- actor_rollout_ref.actor.clip_ratio_c     (verl's vanilla always applies it)
    reduction   <- actor_rollout_ref.actor.loss_agg_mode    (losses with reductions)
    norm_length <- actor_rollout_ref.actor.loss_scale_factor (null: the core's constant 1024; verl would
                                         divide by each micro-batch's padded width)

Every other hyper-parameter keeps its registry default (``kl_beta`` stays 0: verl adds its
own KL loss in ``ppo_loss`` when ``use_kl_loss`` is set).

``loss_agg_mode`` for losses without a ``reduction`` hyper-parameter (reduction fixed by
the method):

    sequence-level (gmpo family, gspo)   seq-mean-token-mean: accepted (it is the method's
                                         per-sequence mean); token-mean (verl's default):
                                         accepted with a one-time warning; others: error
    token-level                          token-mean accepted (verl's default; the loss's own
                                         reduction applies); others: error

Batch normalisation: ``BatchInfo(dp_size, global_batch_size, global_num_tokens)`` from
``config.global_batch_info`` (``dp_size``, ``global_batch_size`` = ppo_mini_batch_size *
rollout.n over all ranks, ``batch_num_tokens``), which ``ppo_loss`` fills before each call.
A key the loss needs that is missing raises ``UpstreamDriftError`` (never a local mean).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping
from typing import Any

from gmpo_plugins.adapters._common import check_translated_hparams
from gmpo_plugins.adapters.reduction_warning import warn_token_mean_for_sequence_loss
from gmpo_plugins.adapters.upstream import TESTED, UpstreamDriftError, framework_version
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM_NORM, TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import BatchInfo

logger = logging.getLogger(__name__)

ACTOR = "actor_rollout_ref.actor"
FIELDS = {
    "eps_low": "clip_ratio_low",
    "eps_high": "clip_ratio_high",
    "dual_clip": "clip_ratio_c",
    "reduction": "loss_agg_mode",
    "norm_length": "loss_scale_factor",
}
_warned: set[tuple[str, str]] = set()


class VerlConfigError(ValueError):
    """A verl actor setting the chosen registry loss cannot honour."""


def _clip_bound(config: Any, field: str) -> Any:
    value = getattr(config, field, None)
    return getattr(config, "clip_ratio", None) if value is None else value


def _check_agg_mode(spec: LossSpec, loss_mode: str, loss_agg_mode: str) -> None:
    """Refuse or warn for a loss whose reduction is fixed by the method."""
    field = f"{ACTOR}.loss_agg_mode"
    if spec.sequence_level and loss_agg_mode == SEQ_MEAN_TOKEN_MEAN:
        return
    if loss_agg_mode == TOKEN_MEAN:
        if spec.sequence_level:
            warn_token_mean_for_sequence_loss(
                logger,
                _warned,
                (loss_mode, loss_agg_mode),
                loss_setting=f"loss_mode={loss_mode}",
                agg_setting=field + "={}",
                framework="verl",
                consequence="verl then also aggregates its entropy and KL-loss terms per sequence",
            )
        return
    accepted = [SEQ_MEAN_TOKEN_MEAN, TOKEN_MEAN] if spec.sequence_level else [TOKEN_MEAN]
    kind = "sequence-level loss" if spec.sequence_level else "loss"
    raise VerlConfigError(
        f"gmpo_plugins: {field}={loss_agg_mode} cannot be expressed by loss_mode={loss_mode}: this {kind} "
        f"has its reduction fixed by the method. Set {field}={accepted[0]}"
        + (f" (or leave verl's default {TOKEN_MEAN})" if len(accepted) > 1 else "")
        + "; to choose a reduction use a loss that has them, e.g. loss_mode=gmpo_plugins.grpo."
    )


def hparams_from_config(spec: LossSpec, config: Any, loss_agg_mode: str, loss_mode: str) -> dict[str, Any]:
    """Hyper-parameters for ``spec`` from verl's actor ``config`` (module docstring).

    Raises VerlConfigError naming the verl field when a value is invalid for the loss or
    cannot be expressed by it.
    """
    if config is None:
        raise VerlConfigError(f"gmpo_plugins: loss_mode={loss_mode} needs verl's actor config (config=None was passed)")
    defaults = spec.defaults
    params: dict[str, Any] = {}
    if "eps_low" in defaults:
        params["eps_low"] = _clip_bound(config, "clip_ratio_low")
    if "eps_high" in defaults:
        params["eps_high"] = _clip_bound(config, "clip_ratio_high")
    if "dual_clip" in defaults:
        params["dual_clip"] = getattr(config, "clip_ratio_c", defaults["dual_clip"])
    if "reduction" in defaults:
        if loss_agg_mode not in spec.reductions:
            field = f"{ACTOR}.loss_agg_mode"
            raise VerlConfigError(
                f"gmpo_plugins: {field}={loss_agg_mode} cannot be expressed by loss_mode={loss_mode}; "
                f"set {field} to one of {list(spec.reductions)}"
            )
        params["reduction"] = loss_agg_mode
    else:
        _check_agg_mode(spec, loss_mode, loss_agg_mode)
    if "norm_length" in defaults and params.get("reduction") == SEQ_MEAN_TOKEN_SUM_NORM:
        scale = getattr(config, "loss_scale_factor", None)
        if scale is not None:  # verl's null means the padded width, which depends on the split
            params["norm_length"] = scale

    check_translated_hparams(
        spec,
        params,
        setting_of=lambda hparam: f"{ACTOR}.{FIELDS[hparam]}",
        context=f"loss_mode={loss_mode}",
        error=VerlConfigError,
    )
    return params


def _count(value: Any) -> Any:
    """An int for integral scalars (verl passes ints; numpy ints too), else as given (None, float)."""
    try:
        return operator.index(value)
    except TypeError:
        return value


GLOBAL_BATCH_INFO = "config.global_batch_info"
"""Filled by verl 0.9's ``ppo_loss`` before every call with dp_size, global_batch_size and
batch_num_tokens (and loss_scale_factor)."""


def needed_counts(spec: LossSpec, hparams: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``global_batch_info`` keys ``spec`` normalises by with ``hparams``: dp_size, and the
    sequence count (sequence-level, seq-mean-*), the token count (token-mean) or both (a loss
    that declares no reduction)."""
    reduction = hparams.get("reduction")
    if spec.sequence_level or reduction in (SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM_NORM):
        return ("dp_size", "global_batch_size")
    if reduction == TOKEN_MEAN:
        return ("dp_size", "batch_num_tokens")
    return ("dp_size", "global_batch_size", "batch_num_tokens")


def batch_info_from_config(config: Any, spec: LossSpec, hparams: Mapping[str, Any], loss_mode: str) -> BatchInfo:
    """``BatchInfo`` from ``config.global_batch_info`` (dp_size, global_batch_size, batch_num_tokens).

    Raises UpstreamDriftError naming the key when one that ``spec`` needs (``needed_counts``)
    is missing: without it the loss could only take a per-micro-batch mean, which is another
    objective. A key present with the value None (no global count) is passed on as None.
    """
    info: Mapping[str, Any] = getattr(config, "global_batch_info", None) or {}
    for key in needed_counts(spec, hparams):
        if key not in info:
            raise UpstreamDriftError(
                f"gmpo_plugins: verl's {GLOBAL_BATCH_INFO} has no {key!r} (keys: {sorted(info)}), which "
                f"loss_mode={loss_mode} needs to normalise by the global mini-batch; verl 0.9's ppo_loss fills it "
                f"before every call, so this {framework_version('verl')} calls the policy loss from another path. "
                "Refusing rather than taking a per-micro-batch mean (another objective); run the verl versions "
                f"the adapter is tested with (verl{TESTED['verl'].specifier})"
            )
    dp_size = info["dp_size"]
    return BatchInfo(
        dp_size=1 if dp_size is None else _count(dp_size),
        global_batch_size=_count(info.get("global_batch_size")),
        global_num_tokens=_count(info.get("batch_num_tokens")),
    )
