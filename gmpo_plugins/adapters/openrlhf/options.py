"""OpenRLHF ``PolicyLoss`` arguments -> a registry loss, its hyper-parameters, ``BatchInfo``.

No OpenRLHF import. OpenRLHF 0.11.2 builds, in ``ActorPPOTrainer.__init__``,

    PolicyLoss(clip_eps_low, clip_eps_high      <- --actor.eps_clip_low_high LOW HIGH
                                                   (default: --actor.eps_clip twice)
               dual_clip                        <- --actor.dual_clip
               token_level_loss                 <- --actor.loss_agg_mode == "token-mean"
               policy_loss_type                 <- --actor.policy_loss_type
               is_correction_level, _mode, _gating, _threshold  <- --algo.advantage.is_correction_*
                                                   (``is_correction``: rollout IS weights))

Names (``policy_loss_type``): OpenRLHF's own ``ppo`` and ``gspo`` keep OpenRLHF's code.
Every registry loss ``<name>`` is reachable as ``gmpo_plugins.<name>``, and as ``<name>``
unless OpenRLHF owns that name (so our ``gspo`` is ``gmpo_plugins.gspo``).

Translation (``OPENRLHF_FIELDS``, ``hparam_sources``), for each hyper-parameter the loss
declares (``spec.defaults``):

    eps_low, eps_high  <- clip_eps_low, clip_eps_high; LOG space for clip_space "log"
                          (gmpo family: per-token log ratio clipped to [-eps_low, eps_high],
                          ratio in (e^-eps_low, e^eps_high); the paper uses 0.4, OpenRLHF's
                          default --actor.eps_clip is 0.2), ratio space for "ratio"
                          (grpo/dapo/gspo: [1 - eps_low, 1 + eps_high], as OpenRLHF's ppo)
    dual_clip          <- dual_clip (losses without it refuse a value)
    reduction          <- token_level_loss: True -> token-mean, False -> seq-mean-token-mean;
                          the other reductions (token-sum, seq-mean-token-sum, and the
                          defining reductions of dr_grpo and luspo) through the override, with
                          --actor.loss_agg_mode left at token-mean
    kl_beta            stays 0 unless set by GMPO_PLUGINS_LOSS_HPARAMS: OpenRLHF adds its
                       own KL loss (--algo.kl.use_loss)

Every other hyper-parameter comes from ``GMPO_PLUGINS_LOSS_HPARAMS`` (``gmpo-openrlhf``
forwards it to the Ray workers through the runtime env) or keeps the loss's default.

``token_level_loss`` for losses without a ``reduction`` (reduction fixed by the method):
sequence-level losses (gmpo family, gspo) are per-sequence means whatever it says; True
(OpenRLHF's default --actor.loss_agg_mode token-mean) is accepted with a one-time warning,
False (seq-mean-token-mean) silently. Token-level losses accept only True.

IS correction (``--algo.advantage.is_correction_*``): every level, mode and gating becomes
the loss's ``rollout_is_weights`` (``is_correction``; a dropped token a zero weight).

Rollout log-probs: OpenRLHF passes them to ``PolicyLoss.forward`` (vLLM returns them) only
when ``--algo.advantage.is_correction_level`` is not off; they become
``LossInputs.rollout_log_probs``. A loss that reads them (``decoupled_ppo``, ``m2po``) or a
correction option of the core that does (``rollout_is``, ``rollout_rs``, ``rollout_bypass``
in ``GMPO_PLUGINS_LOSS_HPARAMS``) is refused without that flag, and the core's correction
(those options, or the loss's own correction defaults) is refused beside an OpenRLHF
correction other than ``PASS_ONLY_FLAGS`` (weight 1: the log-probs only), never applied twice
(``adapters.rollout_source``).

Refused with ``OpenRLHFConfigError`` (at construction, naming the OpenRLHF flag): a
``dual_clip`` for a loss without one, a loss whose defining reduction is not one of
OpenRLHF's two (``dr_grpo``'s seq-mean-token-sum-norm needs a constant length that
PolicyLoss is not given), invalid eps values.

Batch normalisation: ``BatchInfo(dp_size, global_batch_size, global_num_tokens=batch_num_tokens)``
from the forward keywords. OpenRLHF computes them per optimizer step (all micro-batches,
all data-parallel ranks) divided by the accumulation steps ``gas``, and DeepSpeed scales
each micro-batch loss by 1/gas, so ``sum_i L_i / global_batch_size * dp_size`` summed over
the micro-batches is the whole-step mean (the core's rule, and OpenRLHF's own).
"""

from __future__ import annotations

import functools
import json
import logging
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gmpo_plugins.adapters.hparam_sources import (
    OVERRIDE_ENV,
    Field,
    Resolution,
    announce,
    overrides_from_env,
    resolve,
    two_sided,
)
from gmpo_plugins.adapters.inputs import refuse_unsupplied
from gmpo_plugins.adapters.names import PREFIX
from gmpo_plugins.adapters.openrlhf.is_correction import PASS_ONLY_FLAGS, ISCorrection
from gmpo_plugins.adapters.reduction_warning import warn_token_mean_for_sequence_loss
from gmpo_plugins.adapters.rollout_source import refuse_double, refuse_missing
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, TOKEN_MEAN
from gmpo_plugins.core.registry import LossNameCollisionError, list_losses, refused_losses
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import BatchInfo

logger = logging.getLogger(__name__)

OPENRLHF_OWN = ("ppo", "gspo")
OPENRLHF_FIELDS = (  # train_ppo_ray flag (as PolicyLoss receives it) -> registry hyper-parameter
    Field(
        "eps_low",
        "--actor.eps_clip_low_high (LOW)",
        0.2,
        lambda kw: kw["clip_eps_low"],
        when="always (unset: --actor.eps_clip); not for a one-sided ratio cap (cispo)",
        applies=two_sided,
    ),
    Field(
        "eps_high",
        "--actor.eps_clip_low_high (HIGH)",
        0.2,
        lambda kw: kw["clip_eps_high"],
        when="always (unset: --actor.eps_clip)",
    ),
    Field("dual_clip", "--actor.dual_clip", None, lambda kw: kw["dual_clip"]),
    Field(
        "reduction",
        "--actor.loss_agg_mode",
        TOKEN_MEAN,
        lambda kw: TOKEN_MEAN if kw["token_level_loss"] else SEQ_MEAN_TOKEN_MEAN,
    ),
)
FLAGS = {row.hparam: row.name for row in OPENRLHF_FIELDS}
_warned: set[str] = set()


class OpenRLHFConfigError(ValueError):
    """An OpenRLHF setting the chosen registry loss cannot honour."""


@dataclass(frozen=True)
class LossPlan:
    """What a patched ``PolicyLoss`` computes: ``spec(inputs, batch, **hparams)``, with
    OpenRLHF's IS correction as rollout IS weights when ``is_correction`` is set."""

    policy_loss_type: str
    spec: LossSpec
    hparams: Mapping[str, Any]
    is_correction: ISCorrection | None = None

    @functools.cached_property
    def reads_rollout_log_probs(self) -> bool:
        """Whether the call reads ``rollout_log_probs`` (the loss, or a correction option set in
        ``hparams``: ``LossSpec.inputs_for``); only then are OpenRLHF's passed to it. Decided once
        per plan (the hyper-parameters are fixed for the run), not per micro-batch."""
        return "rollout_log_probs" in self.spec.inputs_for(self.hparams)

    @functools.cached_property
    def reads_rewards(self) -> bool:
        """Whether the call reads ``rewards`` (the loss, or a term set in ``hparams``); only then
        are the experience's passed to it (``episode_rewards``)."""
        return "rewards" in self.spec.inputs_for(self.hparams)


def policy_loss_choices() -> list[str]:
    """Every accepted ``policy_loss_type``: OpenRLHF's own, bare registry names, prefixed names
    (names the registry refuses included: asking for one raises its LossNameCollisionError)."""
    names = sorted([spec.name for spec in list_losses()] + list(refused_losses()))
    bare = [name for name in names if name not in OPENRLHF_OWN]
    return [*OPENRLHF_OWN, *bare, *(PREFIX + name for name in names)]


def registry_spec(policy_loss_type: Any) -> LossSpec | None:
    """The registry loss ``policy_loss_type`` names, or None for OpenRLHF's own ``ppo``/``gspo``.

    Raises OpenRLHFConfigError listing the valid names for anything else, and the registry's
    LossNameCollisionError for a name two distributions claim.
    """
    if policy_loss_type in OPENRLHF_OWN:
        return None
    by_name = {spec.name: spec for spec in list_losses()}
    name = policy_loss_type
    if isinstance(name, str) and name.startswith(PREFIX):
        name = name[len(PREFIX) :]
    spec = by_name.get(name) if isinstance(name, str) else None
    if spec is None and name in refused_losses():
        raise LossNameCollisionError(refused_losses()[name])
    if spec is None:
        raise OpenRLHFConfigError(
            f"gmpo_plugins: --actor.policy_loss_type={policy_loss_type!r} is unknown; valid: "
            f"{', '.join(policy_loss_choices())}"
        )
    return spec


def _check_reduction(spec: LossSpec, policy_loss_type: str, token_level_loss: bool) -> None:
    """Refuse (or warn once for) an ``--actor.loss_agg_mode`` the loss cannot express."""
    if "reduction" in spec.defaults:
        flag = TOKEN_MEAN if token_level_loss else SEQ_MEAN_TOKEN_MEAN
        try:
            override = overrides_from_env()
        except ValueError as exc:
            raise OpenRLHFConfigError(str(exc)) from None
        if flag not in spec.reductions and "reduction" not in override:
            wanted = json.dumps({"reduction": spec.reductions[0]})
            raise OpenRLHFConfigError(
                f"gmpo_plugins: --actor.loss_agg_mode {flag} cannot be expressed by "
                f"--actor.policy_loss_type={policy_loss_type}, whose reductions are {list(spec.reductions)} "
                f"(--actor.loss_agg_mode has {TOKEN_MEAN} and {SEQ_MEAN_TOKEN_MEAN} only); leave "
                f"--actor.loss_agg_mode at {TOKEN_MEAN} and set {OVERRIDE_ENV}='{wanted}'"
            )
        return
    if spec.sequence_level:
        if token_level_loss:
            warn_token_mean_for_sequence_loss(
                logger,
                _warned,
                policy_loss_type,
                loss_setting=f"--actor.policy_loss_type={policy_loss_type}",
                agg_setting="--actor.loss_agg_mode {}",
                framework="OpenRLHF",
                consequence="OpenRLHF's KL-loss and entropy terms stay token means either way",
            )
        return
    if not token_level_loss:
        raise OpenRLHFConfigError(
            f"gmpo_plugins: --actor.loss_agg_mode {SEQ_MEAN_TOKEN_MEAN} cannot be expressed by "
            f"--actor.policy_loss_type={policy_loss_type}: this token-level loss has its reduction fixed "
            f"by the method; use --actor.loss_agg_mode {TOKEN_MEAN}"
        )


def loss_resolution(
    policy_loss_type: str,
    *,
    clip_eps_low: Any,
    clip_eps_high: Any,
    dual_clip: Any,
    token_level_loss: Any,
) -> Resolution | None:
    """Every hyper-parameter of the registry loss for PolicyLoss's constructor arguments, with
    its source (module docstring), or None for OpenRLHF's own ppo/gspo. Raises
    OpenRLHFConfigError naming the flag, first for a loss that requires an input the adapter
    does not pass (``adapters.inputs``)."""
    spec = registry_spec(policy_loss_type)
    if spec is None:
        return None
    refuse_unsupplied(spec, "OpenRLHF", OpenRLHFConfigError)
    if "dual_clip" not in spec.defaults and dual_clip is not None:
        raise OpenRLHFConfigError(
            f"gmpo_plugins: --actor.dual_clip={dual_clip!r} is not meaningful for "
            f"--actor.policy_loss_type={policy_loss_type} (the loss has no dual clip); leave it unset"
        )
    _check_reduction(spec, policy_loss_type, bool(token_level_loss))
    arguments = {
        "clip_eps_low": clip_eps_low,
        "clip_eps_high": clip_eps_high,
        "dual_clip": dual_clip,
        "token_level_loss": bool(token_level_loss),
    }
    return resolve(
        spec,
        OPENRLHF_FIELDS,
        arguments,
        framework="OpenRLHF",
        selector=f"--actor.policy_loss_type={policy_loss_type}",
        error=OpenRLHFConfigError,
    )


def plan_loss(
    policy_loss_type: str,
    *,
    clip_eps_low: Any,
    clip_eps_high: Any,
    dual_clip: Any,
    token_level_loss: Any,
    is_correction: ISCorrection | None = None,
) -> LossPlan | None:
    """The registry loss and hyper-parameters for PolicyLoss's constructor arguments
    (``loss_resolution``, announced once per process: ``hparam_sources.announce``), or None
    for OpenRLHF's own ppo/gspo. Raises OpenRLHFConfigError naming the flag."""
    resolution = loss_resolution(
        policy_loss_type,
        clip_eps_low=clip_eps_low,
        clip_eps_high=clip_eps_high,
        dual_clip=dual_clip,
        token_level_loss=token_level_loss,
    )
    if resolution is None:
        return None
    check_rollout(resolution.spec, resolution.params(), is_correction)
    announce(resolution)
    return LossPlan(policy_loss_type, resolution.spec, resolution.params(), is_correction)


def check_rollout(spec: LossSpec, hparams: Mapping[str, Any], is_correction: ISCorrection | None) -> None:
    """Refuse, naming the flags, a call that reads rollout log-probs OpenRLHF will not pass, and
    the core's correction beside OpenRLHF's own (module docstring)."""
    if is_correction is None:
        refuse_missing(
            spec,
            hparams,
            framework="OpenRLHF",
            setting=f"--algo.advantage.is_correction_level token or seq (without its correction: {PASS_ONLY_FLAGS})",
            error=OpenRLHFConfigError,
        )
    elif not is_correction.pass_only:
        refuse_double(
            spec,
            hparams,
            own=f"--algo.advantage.is_correction_level {is_correction.level} --algo.advantage.is_correction_mode "
            f"{is_correction.mode} --algo.advantage.is_correction_gating {is_correction.gating}",
            error=OpenRLHFConfigError,
            instead=f"; {PASS_ONLY_FLAGS} passes the rollout log-probs without OpenRLHF's correction",
        )


def batch_info(dp_size: Any, batch_num_tokens: Any, global_batch_size: Any) -> BatchInfo:
    """``BatchInfo`` from the keywords OpenRLHF passes to ``PolicyLoss.forward``: ``dp_size``
    a Python int, the two counts 0-d float32 tensors (or None: local means)."""
    return BatchInfo(
        dp_size=operator.index(dp_size),
        global_batch_size=global_batch_size,
        global_num_tokens=batch_num_tokens,
    )


def check_advantages(
    spec: LossSpec,
    policy_loss_type: str,
    *,
    estimator: str,
    gamma: float,
    kl_use_loss: bool,
    kl_init_coef: float,
) -> None:
    """Refuse OpenRLHF settings whose advantages vary within a sequence for a sequence-level
    loss (it needs one advantage per sequence): the GAE estimator, ``reinforce`` with
    gamma != 1, and a KL penalty folded into the per-token reward (``--algo.kl.init_coef > 0``
    without ``--algo.kl.use_loss``)."""
    if not spec.sequence_level:
        return
    flag = f"--actor.policy_loss_type={policy_loss_type}"
    if estimator == "gae" or (estimator == "reinforce" and gamma != 1.0):
        raise OpenRLHFConfigError(
            f"gmpo_plugins: {flag} is sequence-level (one advantage per sequence) but "
            f"--algo.advantage.estimator {estimator}"
            + (f" with --algo.advantage.gamma {gamma}" if estimator == "reinforce" else "")
            + " gives per-token advantages; use group_norm, rloo, reinforce_baseline or dr_grpo"
        )
    if kl_init_coef > 0 and not kl_use_loss:
        raise OpenRLHFConfigError(
            f"gmpo_plugins: {flag} is sequence-level (one advantage per sequence) but --algo.kl.init_coef "
            f"{kl_init_coef} without --algo.kl.use_loss puts a per-token KL penalty into the rewards, so "
            "advantages vary within a sequence; add --algo.kl.use_loss (KL as a loss term, as GRPO/GMPO "
            "do) or set --algo.kl.init_coef 0"
        )
