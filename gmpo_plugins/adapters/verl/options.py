"""verl actor config -> registry-loss hyper-parameters and ``BatchInfo`` (no verl import).

verl calls a policy loss with the actor config (``config``, e.g. ``FSDPActorConfig``) and
``loss_agg_mode`` (= ``config.loss_agg_mode``). Its dataclasses reject unknown keys, so
only existing fields can carry our hyper-parameters. ``VERL_FIELDS`` (``hparam_sources``)
feeds each loss that declares the hyper-parameter in its spec (``spec.defaults``):

    eps_low     <- actor_rollout_ref.actor.clip_ratio_low   (or clip_ratio when null)
    eps_high    <- actor_rollout_ref.actor.clip_ratio_high  (or clip_ratio when null)
                   log space for clip_space "log" (gmpo family: ratio kept in
                   (e^-eps_low, e^eps_high), paper value 0.4), ratio space for "ratio"
                   (grpo/dapo/dr_grpo/gspo: [1 - eps_low, 1 + eps_high], as verl's vanilla)
    dual_clip   <- actor_rollout_ref.actor.clip_ratio_c     (verl's vanilla always applies it)
    reduction   <- actor_rollout_ref.actor.loss_agg_mode    (losses with reductions)
    norm_length <- actor_rollout_ref.actor.loss_scale_factor (null: the core's constant 1024; verl would
                                         divide by each micro-batch's padded width)
    delta_low, delta_high <- clip_ratio_low, clip_ratio_high (or clip_ratio): DPPO's divergence
                   thresholds, as verl's dppo_tv / dppo_kl read them
    ratio_cap   <- clip_ratio_c      (DPPO's cap of the stop-gradient IS weight, as verl's)
    tau_pos, tau_neg <- tau_pos, tau_neg                      (SAPO's gate temperatures)
    dro_beta, clip_cov_ratio, clip_cov_lb, clip_cov_ub, kl_cov_ratio, ppo_kl_coef
                <- actor_rollout_ref.actor.policy_loss.<same name>    (null: not set; verl 0.8
                   has no dro_beta: the row is left out there, ``verl_releases``)

cispo takes eps_low/eps_high from the clip_ratio fields as verl's cispo does
(``[1 - clip_ratio_low, 1 + clip_ratio_high]``): verl cannot express the registry's "no lower
clip" (null falls back to clip_ratio), so give ``{"eps_low": null}`` in the override for it.

Every other hyper-parameter comes from ``GMPO_PLUGINS_LOSS_HPARAMS`` or keeps its registry
default (``kl_beta`` stays 0 unless set there: verl adds its own KL loss in ``ppo_loss``
when ``use_kl_loss`` is set). verl starts Ray in its driver (``main_ppo``): on a cluster it
starts itself, the workers inherit the driver's environment; on a running cluster, forward
the variable with ``+ray_kwargs.ray_init.runtime_env.env_vars.GMPO_PLUGINS_LOSS_HPARAMS=...``.

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

from gmpo_plugins.adapters.hparam_sources import ABSENT, Field, Resolution, announce, attribute, resolve
from gmpo_plugins.adapters.inputs import refuse_unsupplied
from gmpo_plugins.adapters.reduction_warning import warn_token_mean_for_sequence_loss
from gmpo_plugins.adapters.upstream import TESTED, UpstreamDriftError, framework_version
from gmpo_plugins.adapters.verl_releases import installed
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM_NORM, TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import BatchInfo

logger = logging.getLogger(__name__)

ACTOR = "actor_rollout_ref.actor"


def _actor(field: str, default: Any, hparam: str, *, none_absent: bool = False, when: str = "") -> Field:
    return Field(hparam, f"{ACTOR}.{field}", default, attribute(field, none_absent=none_absent), when=when)


def _policy_loss(field: str, default: Any, hparam: str | None = None) -> Field:
    """A ``policy_loss.<field>`` row (verl's ``PolicyLossConfig``; null reads as not set)."""
    return _actor(f"policy_loss.{field}", default, hparam or field, none_absent=True, when="not null")


def _norm_length(config: Any) -> Any:
    """loss_scale_factor under seq-mean-token-sum-norm; verl's null means each micro-batch's
    padded width, which depends on the split: the loss's constant then applies."""
    if getattr(config, "loss_agg_mode", None) != SEQ_MEAN_TOKEN_SUM_NORM:
        return ABSENT
    value = getattr(config, "loss_scale_factor", None)
    return ABSENT if value is None else value


_RELEASE = installed()
VERL_FIELDS = (  # verl ActorConfig field -> registry hyper-parameter (verl 0.9.1 defaults)
    _actor("clip_ratio_low", 0.2, "eps_low", none_absent=True, when="not null"),
    _actor("clip_ratio", 0.2, "eps_low", when="clip_ratio_low is null"),
    _actor("clip_ratio_high", 0.2, "eps_high", none_absent=True, when="not null"),
    _actor("clip_ratio", 0.2, "eps_high", when="clip_ratio_high is null"),
    _actor("clip_ratio_c", 3.0, "dual_clip"),
    # DPPO: verl reads its PPO bounds as divergence thresholds and clip_ratio_c as the IS cap
    _actor("clip_ratio_low", 0.2, "delta_low", none_absent=True, when="not null"),
    _actor("clip_ratio", 0.2, "delta_low", when="clip_ratio_low is null"),
    _actor("clip_ratio_high", 0.2, "delta_high", none_absent=True, when="not null"),
    _actor("clip_ratio", 0.2, "delta_high", when="clip_ratio_high is null"),
    _actor("clip_ratio_c", 3.0, "ratio_cap"),
    _actor("tau_pos", 1.0, "tau_pos"),
    _actor("tau_neg", 1.05, "tau_neg"),
    *((_policy_loss("dro_beta", None),) if _RELEASE.dro_beta else ()),  # 0.8 has no such field
    _policy_loss("clip_cov_ratio", 2e-4),
    _policy_loss("clip_cov_lb", 1.0),
    _policy_loss("clip_cov_ub", 5.0),
    _policy_loss("kl_cov_ratio", 2e-4),
    _policy_loss("ppo_kl_coef", 0.1),
    _actor("loss_agg_mode", TOKEN_MEAN, "reduction"),
    Field(
        "norm_length",
        f"{ACTOR}.loss_scale_factor",
        None,
        _norm_length,
        when="not null, with loss_agg_mode=seq-mean-token-sum-norm",
    ),
)
FIELDS = {  # hyper-parameter -> the actor field it is first taken from
    row.hparam: row.name.removeprefix(f"{ACTOR}.") for row in reversed(VERL_FIELDS)
}
_warned: set[tuple[str, str]] = set()


class VerlConfigError(ValueError):
    """A verl actor setting the chosen registry loss cannot honour."""


class _ActorView:
    """The actor config with ``loss_agg_mode`` as verl passed it to the loss."""

    def __init__(self, config: Any, loss_agg_mode: str) -> None:
        self._config = config
        self.loss_agg_mode = loss_agg_mode

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


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


def resolution_from_config(spec: LossSpec, config: Any, loss_agg_mode: str, loss_mode: str) -> Resolution:
    """Every hyper-parameter of ``spec`` from verl's actor ``config`` and the override, with its
    source (module docstring; ``hparam_sources``).

    Raises VerlConfigError for a loss that requires an input the adapter does not pass
    (``adapters.inputs``), and naming the verl field when a value is invalid for the loss or
    cannot be expressed by it.
    """
    refuse_unsupplied(spec, "verl", VerlConfigError)
    if config is None:
        raise VerlConfigError(f"gmpo_plugins: loss_mode={loss_mode} needs verl's actor config (config=None was passed)")
    if "reduction" in spec.defaults:
        if loss_agg_mode not in spec.reductions:
            field = f"{ACTOR}.loss_agg_mode"
            raise VerlConfigError(
                f"gmpo_plugins: {field}={loss_agg_mode} cannot be expressed by loss_mode={loss_mode}; "
                f"set {field} to one of {list(spec.reductions)}"
            )
    else:
        _check_agg_mode(spec, loss_mode, loss_agg_mode)
    actor = _ActorView(config, loss_agg_mode)
    return resolve(spec, VERL_FIELDS, actor, framework="verl", selector=f"loss_mode={loss_mode}", error=VerlConfigError)


def hparams_from_config(spec: LossSpec, config: Any, loss_agg_mode: str, loss_mode: str) -> dict[str, Any]:
    """The hyper-parameters ``spec`` is called with (``resolution_from_config``), announced once
    per process (``hparam_sources.announce``: the provenance line, the default warning)."""
    resolution = resolution_from_config(spec, config, loss_agg_mode, loss_mode)
    announce(resolution)
    return resolution.params()


def _count(value: Any) -> Any:
    """An int for integral scalars (verl passes ints; numpy ints too), else as given (None, float)."""
    try:
        return operator.index(value)
    except TypeError:
        return value


GLOBAL_BATCH_INFO = "config.global_batch_info"
"""Filled by verl's ``ppo_loss`` (0.8, 0.9) before every call with dp_size, global_batch_size and
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
                f"loss_mode={loss_mode} needs to normalise by the global mini-batch; verl's ppo_loss (0.8, 0.9) "
                f"fills it before every call, so this {framework_version('verl')} calls the policy loss from another "
                "path. Refusing rather than taking a per-micro-batch mean (another objective); run the verl versions "
                f"the adapter is tested with (verl{TESTED['verl'].specifier})"
            )
    dp_size = info["dp_size"]
    return BatchInfo(
        dp_size=1 if dp_size is None else _count(dp_size),
        global_batch_size=_count(info.get("global_batch_size")),
        global_num_tokens=_count(info.get("batch_num_tokens")),
    )
