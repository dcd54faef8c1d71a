"""The verl backend of ``gmpo-plugins compare``: registry losses through verl's own policy-loss
registry, as verl's ``ppo_loss`` calls them.

For each mini-batch the backend builds verl's actor config (``FSDPActorConfig``, one per
distinct setting; verl's configs are frozen), fills ``config.global_batch_info`` as
``ppo_loss`` does, looks the loss up with ``core_algos.get_policy_loss_fn`` under its
unambiguous name ``gmpo_plugins.<name>`` (registered by ``gmpo_plugins.adapters.verl``) and
calls it with verl's keywords. Translation (the inverse of ``adapters.verl.options``):

    eps_low, eps_high  -> clip_ratio_low, clip_ratio_high   (same units as the core)
    dual_clip          -> clip_ratio_c
    reduction          -> loss_agg_mode    (sequence-level losses: seq-mean-token-mean;
                                            token-level losses without reductions: token-mean)
    norm_length        -> loss_scale_factor
    advantages (B,)    -> (B, T) advantages * mask (verl's GRPO layout)
    BatchInfo          -> global_batch_info (dp_size, global_batch_size, batch_num_tokens)
    metrics            <- actor/gmpo/<key> -> <key>; policy_loss = the returned loss

Hyper-parameters verl cannot carry (``kl_beta``, ``kl_estimator``, ``log_ratio_bound``) must
keep their registry defaults; other values raise ``BackendError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.verl.options import ACTOR, FIELDS, VERL_FIELDS
from gmpo_plugins.compare.backends.base import Metric, PolicyLossCall, environ, refuse_uncarried, strip_prefix
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, TOKEN_MEAN
from gmpo_plugins.core.registry import get_loss

METRIC_PREFIX = "actor/gmpo/"


def verl_fields(loss_name: str, hparams: Mapping[str, Any]) -> dict[str, Any]:
    """verl actor-config fields carrying ``hparams`` of registry loss ``loss_name`` (the first
    ``VERL_FIELDS`` row that feeds the loss; None values go through ``verl_override``)."""
    spec = get_loss(loss_name)
    refuse_uncarried("verl", "verl's actor config", loss_name, hparams, FIELDS)
    fields = {}
    for name, value in hparams.items():
        row = next((row for row in VERL_FIELDS if row.hparam == name and row.feeds(spec)), None)
        if row is not None and value is not None:
            fields[row.name.removeprefix(f"{ACTOR}.")] = value
    if "reduction" not in spec.defaults:
        fields["loss_agg_mode"] = SEQ_MEAN_TOKEN_MEAN if spec.sequence_level else TOKEN_MEAN
    return fields


def verl_override(loss_name: str, hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The hyper-parameters whose None (off) no verl field carries (a null field falls back to
    another, e.g. cispo's eps_low to clip_ratio): ``GMPO_PLUGINS_LOSS_HPARAMS`` carries them."""
    spec = get_loss(loss_name)
    return {name: None for name, value in hparams.items() if value is None and name in FIELDS and name in spec.defaults}


class VerlBackend:
    """Registry losses called through verl 0.9's ``POLICY_LOSS_REGISTRY`` (module docstring)."""

    name = "verl"
    accepts_rollout_is_weights = True  # passed to the policy loss as verl's actor passes them

    def __init__(self) -> None:
        import gmpo_plugins.adapters.verl  # noqa: F401 - registers the losses (idempotent)

        self._configs: dict[tuple, Any] = {}

    def supports(self, loss_name: str) -> bool:
        from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

        from gmpo_plugins.adapters.inputs import refusal
        from gmpo_plugins.adapters.verl import PREFIX

        return refusal(get_loss(loss_name), "verl") is None and PREFIX + loss_name in POLICY_LOSS_REGISTRY

    def _config(self, loss_mode: str, fields: Mapping[str, Any]):
        key = (loss_mode, tuple(sorted(fields.items())))
        if key not in self._configs:
            from verl.workers.config import FSDPActorConfig, PolicyLossConfig

            nested = {k.removeprefix("policy_loss."): v for k, v in fields.items() if k.startswith("policy_loss.")}
            self._configs[key] = FSDPActorConfig(
                strategy="fsdp",
                rollout_n=1,
                ppo_micro_batch_size_per_gpu=1,
                policy_loss=PolicyLossConfig(loss_mode=loss_mode, **nested),
                **{k: v for k, v in fields.items() if not k.startswith("policy_loss.")},
            )
        return self._configs[key]

    def policy_loss(self, call: PolicyLossCall) -> tuple[torch.Tensor, Mapping[str, Metric]]:
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        from gmpo_plugins.adapters.verl import PREFIX

        loss_mode = PREFIX + call.loss_name
        config = self._config(loss_mode, verl_fields(call.loss_name, call.hparams))
        override = verl_override(call.loss_name, call.hparams)
        config.global_batch_info.update(
            dp_size=call.batch_info.dp_size,
            global_batch_size=_as_int(call.batch_info.global_batch_size),
            batch_num_tokens=_as_int(call.batch_info.global_num_tokens),
            loss_scale_factor=config.loss_scale_factor,
        )
        mask = call.mask.bool()
        with environ(OVERRIDE_ENV, json.dumps(override) if override else None):
            loss, metrics = get_policy_loss_fn(loss_mode)(
                old_log_prob=call.old_log_probs,
                log_prob=call.log_probs,
                advantages=call.token_advantages(mask),
                response_mask=mask,
                loss_agg_mode=config.loss_agg_mode,
                config=config,
                rollout_is_weights=call.rollout_is_weights,
            )
        core = strip_prefix(metrics, METRIC_PREFIX)
        core["policy_loss"] = loss.detach()
        return loss, core


def _as_int(value: Any) -> Any:
    """verl passes counts as Python ints (``.item()`` in its engine)."""
    return int(value) if isinstance(value, torch.Tensor) else value


def make_backend() -> VerlBackend:
    return VerlBackend()
