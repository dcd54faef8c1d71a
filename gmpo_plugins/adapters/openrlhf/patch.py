"""Patch ``openrlhf.models.loss.PolicyLoss`` in place so registry losses are policy_loss_types.

OpenRLHF binds the class by name in ``openrlhf.models`` and again in
``openrlhf.trainer.ray.ppo_actor``; replacing the module attribute would miss those
bindings, so the class object itself gets a new ``__init__`` and ``forward``:

    __init__(*args, **kwargs)   OpenRLHF's own __init__ (its attributes and checks), then
                                ``options.plan_loss`` from those attributes: None for
                                ppo/gspo, else the registry loss and its hyper-parameters
                                (refusals raise here, at construction)
    forward(*args, **kwargs)    ppo/gspo: OpenRLHF's own forward with the same arguments
                                (byte-identical results); a registry loss:

        LossInputs(log_probs (B, A), old_log_probs (B, A), advantages (B, A) or (B,),
                   mask=action_mask (B, A) int64/bool, all ones when None,
                   rollout_log_probs (B, A) or None, rollout_is_weights (B, A) or None)
        BatchInfo(dp_size, global_batch_size, global_num_tokens=batch_num_tokens)
        out = spec(inputs, batch, **hparams)
        return (out.loss, out.metrics["clip_frac"], out.metrics["ppo_kl"], None, None)

A ``PolicyLoss`` whose signature differs from the one translated here (another OpenRLHF)
is not patched: its ``__init__`` only refuses a registry ``policy_loss_type`` with
UnsupportedOpenRLHFVersionError naming the signature, and runs OpenRLHF's own ppo/gspo
untouched (``refuse_registry_losses``).

Every metric of ``out`` also goes to OpenRLHF's logger as ``gmpo/<key>`` (``logged_metrics``, through
``training_step`` and ``ppo_train``).

The 5-tuple is OpenRLHF 0.11.2's ``(loss, clip_ratio, ppo_kl, vllm_kl, is_filter_ratio)``;
the last two are None without IS correction, and OpenRLHF's values with it (the correction
becomes the loss's ``rollout_is_weights``: ``is_correction``). ``clip_frac`` (valid tokens
whose clipped value was chosen) and ``ppo_kl`` (mean of old - new log-prob over valid tokens)
mean what OpenRLHF's ``clip_ratio`` and ``ppo_kl`` mean; a plugin loss without them reports 0.
``rollout_log_probs`` (given when ``--algo.advantage.is_correction_level`` is on) is the loss's
``rollout_log_probs`` where the call reads them (the core's correction options and the losses
that read them: ``LossPlan.reads_rollout_log_probs``), not otherwise; with
``is_correction.PASS_ONLY`` OpenRLHF's weights (all 1) are not passed. The loss math is the registry's; this
module only translates.
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType
from typing import Any

import torch

from gmpo_plugins.adapters._common import value_checks_enabled
from gmpo_plugins.adapters.load_failure import PluginLoadError, load_failure_message
from gmpo_plugins.adapters.openrlhf.episode_rewards import current_rewards
from gmpo_plugins.adapters.openrlhf.is_correction import ISCorrection, rollout_is_weights
from gmpo_plugins.adapters.openrlhf.logged_metrics import keep
from gmpo_plugins.adapters.openrlhf.options import (
    OPENRLHF_OWN,
    LossPlan,
    OpenRLHFConfigError,
    batch_info,
    plan_loss,
)
from gmpo_plugins.adapters.openrlhf.plan_attribute import PLAN
from gmpo_plugins.adapters.openrlhf.version import SUPPORTED, UnsupportedOpenRLHFVersionError, check_version
from gmpo_plugins.core.registry import LossNameCollisionError
from gmpo_plugins.core.types import LossInputs

MARKER = "__gmpo_plugins_patched__"
PATCHED_BY = "PolicyLoss patched by gmpo_plugins.adapters.openrlhf.install() or its Ray worker setup hook"
REFUSAL = "__gmpo_plugins_refusal__"
INIT_PARAMETERS = (
    "self",
    "clip_eps_low",
    "clip_eps_high",
    "dual_clip",
    "token_level_loss",
    "policy_loss_type",
    "is_correction_level",
    "is_correction_mode",
    "is_correction_gating",
    "is_correction_threshold",
)
FORWARD_PARAMETERS = (
    "self",
    "log_probs",
    "old_log_probs",
    "advantages",
    "action_mask",
    "rollout_log_probs",
    "dp_size",
    "batch_num_tokens",
    "global_batch_size",
)


def signature_mismatch(cls: type) -> str | None:
    """Why ``cls`` (OpenRLHF's PolicyLoss) cannot be patched, or None when its signature is the one translated."""
    for method, expected in (("__init__", INIT_PARAMETERS), ("forward", FORWARD_PARAMETERS)):
        found = tuple(inspect.signature(getattr(cls, method)).parameters)
        if found != expected:
            return (
                f"gmpo_plugins: openrlhf.models.loss.PolicyLoss.{method} has parameters {found}, not the "
                f"{expected} of the OpenRLHF versions this adapter supports (openrlhf{SUPPORTED})"
            )
    return None


def refuse_registry_losses(cls: Any, why: str) -> None:
    """Make ``cls.__init__`` raise UnsupportedOpenRLHFVersionError(``why``) for a registry
    ``policy_loss_type`` and run OpenRLHF's own ``__init__`` unchanged for anything else."""
    original_init = cls.__init__

    def refuse(requested: Any) -> None:
        if requested is not None and requested not in OPENRLHF_OWN:
            raise UnsupportedOpenRLHFVersionError(f"{why}; --actor.policy_loss_type {requested} cannot run")

    @functools.wraps(original_init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        refuse(kwargs.get("policy_loss_type"))  # before OpenRLHF's own checks, which may reject the name
        original_init(self, *args, **kwargs)
        refuse(self.__dict__.get("policy_loss_type"))  # given positionally

    cls.__init__ = __init__
    setattr(cls, REFUSAL, why)
    setattr(cls, MARKER, True)


def registry_forward(
    plan: LossPlan,
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor | None,
    rollout_log_probs: torch.Tensor | None,
    dp_size: Any,
    batch_num_tokens: Any,
    global_batch_size: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """OpenRLHF's PolicyLoss.forward contract computed by ``plan.spec`` (module docstring)."""
    mask = torch.ones_like(log_probs, dtype=torch.bool) if action_mask is None else action_mask
    weights = vllm_kl = filter_ratio = None
    if plan.is_correction is not None:
        if rollout_log_probs is None:
            raise OpenRLHFConfigError(
                f"gmpo_plugins: --algo.advantage.is_correction_level {plan.is_correction.level} needs the rollout "
                "log-probs, and PolicyLoss.forward was given rollout_log_probs=None"
            )
        weights, vllm_kl, filter_ratio = rollout_is_weights(plan.is_correction, old_log_probs, rollout_log_probs, mask)
        if plan.is_correction.pass_only:
            weights = None
    out = plan.spec(
        LossInputs(
            log_probs=log_probs,
            old_log_probs=old_log_probs,
            advantages=advantages,
            mask=mask,
            rollout_log_probs=rollout_log_probs if plan.reads_rollout_log_probs else None,
            rewards=current_rewards(log_probs.shape[0], plan.policy_loss_type) if plan.reads_rewards else None,
            rollout_is_weights=weights,
        ),
        batch_info(dp_size, batch_num_tokens, global_batch_size),
        validate=value_checks_enabled(f"openrlhf:{plan.policy_loss_type}"),
        **plan.hparams,
    )
    keep(out.metrics)
    zero = torch.zeros((), dtype=out.loss.dtype, device=out.loss.device)
    return out.loss, out.metrics.get("clip_frac", zero), out.metrics.get("ppo_kl", zero), vllm_kl, filter_ratio


def patch_policy_loss(module: ModuleType) -> None:
    """Patch ``module.PolicyLoss`` (the executed ``openrlhf.models.loss``) in place; idempotent.

    Outside the tested range it warns once (``version``); a PolicyLoss with another
    signature only refuses registry losses (``refuse_registry_losses``).
    """
    cls = module.PolicyLoss
    if cls.__dict__.get(MARKER):
        return
    check_version()
    why = signature_mismatch(cls)
    if why is not None:
        refuse_registry_losses(cls, why)
        return
    original_init, original_forward = cls.__init__, cls.forward
    forward_signature = inspect.signature(original_forward)

    @functools.wraps(original_init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            self.__dict__[PLAN] = plan_loss(
                self.policy_loss_type,
                clip_eps_low=self.clip_eps_low,
                clip_eps_high=self.clip_eps_high,
                dual_clip=self.dual_clip,
                token_level_loss=self.token_level_loss,
                is_correction=None
                if self.is_correction_level == "off"
                else ISCorrection(
                    self.is_correction_level,
                    self.is_correction_mode,
                    self.is_correction_gating,
                    tuple(self.is_correction_threshold),
                ),
            )
        except (OpenRLHFConfigError, LossNameCollisionError):
            raise
        except Exception as error:  # the registry cannot load here: say so, not "invalid policy loss type"
            setting = f"OpenRLHF --actor.policy_loss_type {self.policy_loss_type}"
            raise PluginLoadError(load_failure_message(setting, PATCHED_BY, error)) from error

    @functools.wraps(original_forward)
    def forward(self, *args: Any, **kwargs: Any):
        plan = self.__dict__.get(PLAN)
        if plan is None:
            return original_forward(self, *args, **kwargs)
        bound = forward_signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = bound.arguments
        return registry_forward(
            plan,
            arguments["log_probs"],
            arguments["old_log_probs"],
            arguments["advantages"],
            arguments["action_mask"],
            arguments["rollout_log_probs"],
            arguments["dp_size"],
            arguments["batch_num_tokens"],
            arguments["global_batch_size"],
        )

    cls.__init__ = __init__
    cls.forward = forward
    setattr(cls, MARKER, True)


def is_patched(cls: type) -> bool:
    """True when ``cls`` (OpenRLHF's PolicyLoss) carries this patch (not only the refusal)."""
    return bool(cls.__dict__.get(MARKER)) and REFUSAL not in cls.__dict__


def refusal(cls: type) -> str | None:
    """Why registry losses are refused on ``cls`` (OpenRLHF's PolicyLoss), or None."""
    return cls.__dict__.get(REFUSAL)
