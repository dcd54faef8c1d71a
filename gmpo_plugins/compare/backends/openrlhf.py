"""The OpenRLHF backend of ``gmpo-plugins compare`` / ``parity``: registry losses through
OpenRLHF 0.11.2's own ``openrlhf.models.loss.PolicyLoss``, patched by
``gmpo_plugins.adapters.openrlhf`` (the class ``ActorPPOTrainer.training_step`` calls).

For each mini-batch the backend builds (once per distinct setting) the PolicyLoss that
``ActorPPOTrainer`` would build from the CLI flags, under the unambiguous name
``gmpo_plugins.<name>``, and calls it as ``training_step`` does. Translation (the inverse of
``adapters.openrlhf.options``):

    eps_low, eps_high   -> clip_eps_low, clip_eps_high   (--actor.eps_clip_low_high; core units)
    dual_clip           -> dual_clip                     (--actor.dual_clip)
    reduction           -> token_level_loss = reduction == "token-mean"  (--actor.loss_agg_mode;
                           sequence-level losses: False, i.e. seq-mean-token-mean, no warning)
    advantages (B,)     -> (B, T) advantages * mask       (OpenRLHF's per-token layout)
    mask (B, T) bool    -> action_mask int64              (OpenRLHF's dtype)
    BatchInfo           -> dp_size (int), batch_num_tokens, global_batch_size (0-d float32)
    metrics             <- clip_ratio -> clip_frac, ppo_kl -> ppo_kl, policy_loss = the loss

Hyper-parameters OpenRLHF cannot carry (``kl_beta``, ``kl_estimator``, ``log_ratio_bound``,
``norm_length``) must keep their registry defaults, else ``BackendError``. ``supports`` is
False for losses the adapter refuses (``dr_grpo``).

``parity_targets()`` adds, besides the adapter, OpenRLHF's own ``ppo`` (for grpo/dapo) and
``gspo`` (for gspo) as *reference* targets: third-party implementations whose differences
are reported, never an error.

On a machine without CUDA, importing OpenRLHF needs stand-ins for ``flash_attn_2_cuda`` and
``vllm`` on PYTHONPATH (``examples/openrlhf_cpu/shims``, CPU stand-ins outside the package).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.compare.backends.base import (
    BackendError,
    Metric,
    OwnLosses,
    ParityTarget,
    PolicyLossCall,
    adapter_and_own_targets,
    environ,
)
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, TOKEN_MEAN
from gmpo_plugins.core.registry import get_loss

OWN = OwnLosses(
    names={"grpo": "ppo", "dapo": "ppo", "gspo": "gspo"},
    label="ppo/gspo",
    note="OpenRLHF's own PolicyLoss ppo (grpo, dapo) and gspo",
)


def policy_loss_kwargs(loss_name: str, hparams: Mapping[str, Any], policy_loss_type: str) -> dict[str, Any]:
    """OpenRLHF PolicyLoss constructor arguments carrying ``hparams`` of ``loss_name``."""
    spec = get_loss(loss_name)
    reduction = hparams.get("reduction")
    low = hparams.get("eps_low")
    return {
        "clip_eps_low": 0.2 if low is None else low,  # a one-sided cap (cispo) reads no lower bound
        "clip_eps_high": hparams.get("eps_high", 0.2),
        "dual_clip": hparams.get("dual_clip"),
        "token_level_loss": reduction != SEQ_MEAN_TOKEN_MEAN if reduction is not None else not spec.sequence_level,
        "policy_loss_type": policy_loss_type,
    }


def policy_loss_override(loss_name: str, hparams: Mapping[str, Any]) -> dict[str, Any]:
    """What ``GMPO_PLUGINS_LOSS_HPARAMS`` carries for ``hparams`` of ``loss_name``: every value
    PolicyLoss's arguments do not (a reduction other than token-mean / seq-mean-token-mean,
    the hyper-parameters OpenRLHF has no flag for) that differs from the loss's default."""
    defaults = get_loss(loss_name).defaults
    carried = {"eps_low", "eps_high", "dual_clip"}
    if hparams.get("reduction") in (TOKEN_MEAN, SEQ_MEAN_TOKEN_MEAN):
        carried.add("reduction")
    return {
        name: value
        for name, value in hparams.items()
        if name not in carried and (value != defaults.get(name) or name == "reduction")
    }


def _count(value: Any, device: torch.device) -> torch.Tensor | None:
    """OpenRLHF passes the global counts as 0-d float32 tensors (``loss_utils``)."""
    return None if value is None else torch.as_tensor(value, dtype=torch.float32, device=device).reshape(())


class OpenRLHFBackend:
    """A registry loss through the patched PolicyLoss (``own=False``), or OpenRLHF's own
    ppo/gspo for the registry loss it implements (``own=True``, a reference)."""

    def __init__(self, own: bool = False) -> None:
        from gmpo_plugins.adapters.openrlhf import install

        install()
        from openrlhf.models.loss import PolicyLoss

        self._policy_loss_class = PolicyLoss
        self._own = own
        self._modules: dict[tuple, Any] = {}
        self.name = "openrlhf own" if own else "openrlhf"

    def supports(self, loss_name: str) -> bool:
        """Whether ``policy_loss`` can call the loss: OpenRLHF's own for ``own``; else a registry loss
        PolicyLoss accepts that reads no optional input (a ``PolicyLossCall`` carries no rewards,
        which the adapter takes from the experience of OpenRLHF's training step)."""
        from gmpo_plugins.adapters.inputs import refusal
        from gmpo_plugins.adapters.openrlhf.options import OpenRLHFConfigError

        if self._own:
            return OWN.supports(loss_name)
        if refusal(get_loss(loss_name), "openrlhf", caller="the OpenRLHF compare backend") is not None:
            return False
        try:
            self._module(loss_name, get_loss(loss_name).resolve({}))
        except (OpenRLHFConfigError, BackendError):
            return False
        return True

    def _module(self, loss_name: str, hparams: Mapping[str, Any]):
        from gmpo_plugins.adapters.openrlhf.options import PREFIX

        kwargs = policy_loss_kwargs(loss_name, hparams, OWN.loss_type(loss_name, self._own, PREFIX))
        override = {} if self._own else policy_loss_override(loss_name, hparams)
        key = (tuple(sorted(kwargs.items())), json.dumps(override, sort_keys=True))
        if key not in self._modules:
            with environ(OVERRIDE_ENV, json.dumps(override) if override else None):
                self._modules[key] = self._policy_loss_class(**kwargs)
        return self._modules[key]

    def policy_loss(self, call: PolicyLossCall) -> tuple[torch.Tensor, Mapping[str, Metric]]:
        call.require_no_rollout_is_weights(self.name)
        action_mask = call.mask.to(torch.long)
        loss, clip_ratio, ppo_kl, _, _ = self._module(call.loss_name, call.hparams)(
            call.log_probs,
            call.old_log_probs,
            call.token_advantages(action_mask),
            action_mask=action_mask,
            rollout_log_probs=None,
            dp_size=call.batch_info.dp_size,
            batch_num_tokens=_count(call.batch_info.global_num_tokens, call.mask.device),
            global_batch_size=_count(call.batch_info.global_batch_size, call.mask.device),
        )
        return loss, {"policy_loss": loss.detach(), "clip_frac": clip_ratio, "ppo_kl": ppo_kl}


def make_backend() -> OpenRLHFBackend:
    return OpenRLHFBackend()


def parity_targets() -> Iterator[ParityTarget]:
    """The adapter, and OpenRLHF's own ppo / gspo as references."""
    return adapter_and_own_targets("openrlhf", OpenRLHFBackend, "patched PolicyLoss", OWN)
