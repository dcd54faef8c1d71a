"""The SkyRL backend of ``gmpo-plugins compare`` / ``parity``: registry losses through SkyRL
0.3's own ``PolicyLossRegistry`` (registered by ``gmpo_plugins.adapters.skyrl``), fed as
SkyRL's trainer and policy worker feed a policy loss.

For each micro-batch the backend builds SkyRL's ``AlgorithmConfig`` (``trainer.algorithm``),
scales the advantages with SkyRL's ``apply_loss_reduction_to_advantages_minibatch``, looks
the loss up under its unambiguous name ``gmpo_plugins.<name>``, calls it with SkyRL's
arguments and multiplies the result by ``dp_size`` (as ``_forward_backward_micro``).
Translation (the inverse of ``adapters.skyrl.options``):

    eps_low, eps_high  -> eps_clip_low, eps_clip_high   (same units as the core)
    reduction          -> loss_reduction    token-mean -> token_mean, seq-mean-token-mean ->
                                            sequence_mean, seq-mean-token-sum-norm ->
                                            seq_mean_token_sum_norm; sequence-level
                                            losses: sequence_mean
    norm_length        -> max_seq_len       (None: the padded width T, as the core)
    advantages (B,)    -> (B, T) advantages * mask (SkyRL's GRPO layout), then scaled
    BatchInfo          -> SkyRL scales over the global mini-batch; this backend sees one
                          micro-batch, so the scaled advantages are multiplied by
                          local / global count (tokens for token_mean, sequences otherwise)
    metrics            <- clip_ratio -> clip_frac, gmpo/<key> -> <key>, policy_loss = the loss

Hyper-parameters SkyRL's config cannot carry (``dual_clip``, ``kl_beta``, ``kl_estimator``,
``log_ratio_bound``) must keep their registry defaults, else ``BackendError``.

``parity_targets()`` adds, besides the adapter, SkyRL's own ``regular`` (for grpo, dapo,
dr_grpo) and ``gspo`` (for gspo) as *reference* targets: third-party implementations
whose differences are reported, never an error.

On Python 3.11, skyrl 0.3.0 itself does not import without ``tests/skyrl/shims`` on
PYTHONPATH (see docs/integrations/skyrl.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

from gmpo_plugins.adapters.skyrl.options import (
    ALGORITHM,
    CORE_REDUCTION,
    FIELDS,
    SKYRL_FIELDS,
    accepted_reductions,
    sums_sequences,
)
from gmpo_plugins.compare.backends.base import (
    BackendError,
    Metric,
    OwnLosses,
    ParityTarget,
    PolicyLossCall,
    adapter_and_own_targets,
    refuse_uncarried,
    strip_prefix,
)
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import BatchInfo

SKYRL_REDUCTION = {core: skyrl for skyrl, core in CORE_REDUCTION.items()}
OWN = OwnLosses(
    names={"grpo": "regular", "dapo": "regular", "dr_grpo": "regular", "gspo": "gspo"},
    label="regular/gspo",
    note="SkyRL's own regular (grpo, dapo, dr_grpo) and gspo",
)
METRIC_PREFIX = "gmpo/"


def algorithm_fields(loss_name: str, hparams: Mapping[str, Any], width: int) -> dict[str, Any]:
    """SkyRL ``trainer.algorithm`` fields carrying ``hparams`` of ``loss_name``; ``width`` is
    the padded T (the core's default constant length)."""
    spec = get_loss(loss_name)
    if not spec.linear_in_advantages:
        raise BackendError(f"skyrl: {loss_name} is not linear in the advantages, which SkyRL pre-scales")
    refuse_uncarried("skyrl", "SkyRL's trainer.algorithm config", loss_name, hparams, FIELDS)
    if "reduction" in hparams:
        reduction = accepted_reductions(spec)[0] if sums_sequences(spec) else SKYRL_REDUCTION[hparams["reduction"]]
    else:
        reduction = "sequence_mean" if spec.sequence_level else "token_mean"
    norm_length = hparams.get("norm_length")
    fields: dict[str, Any] = {
        "loss_reduction": reduction,
        "max_seq_len": width if norm_length is None else norm_length,
    }
    for name, value in hparams.items():
        row = next((row for row in SKYRL_FIELDS if row.hparam == name and row.feeds(spec)), None)
        if row is not None and name not in ("reduction", "norm_length") and value is not None:
            fields[row.name.removeprefix(f"{ALGORITHM}.")] = value
    return fields


def algorithm_config(policy_loss_type: str, fields: Mapping[str, Any]) -> Any:
    """SkyRL's ``AlgorithmConfig`` with ``fields`` set, dotted names in its nested configs
    (``sapo.tau_pos``)."""
    from skyrl.train.config import AlgorithmConfig

    config = AlgorithmConfig(
        policy_loss_type=policy_loss_type, **{key: value for key, value in fields.items() if "." not in key}
    )
    for key, value in fields.items():
        if "." in key:
            group, attr = key.split(".", 1)
            setattr(getattr(config, group), attr, value)
    return config


def _global_ratio(reduction: str, mask: torch.Tensor, batch_info: BatchInfo) -> torch.Tensor | float:
    """local / global count: turns SkyRL's scaling of this micro-batch into its scaling of the
    global mini-batch (1.0 when the global count is unknown: a local mean)."""
    if reduction == "token_mean":
        total = batch_info.global_num_tokens
        return 1.0 if total is None else mask.sum() / torch.as_tensor(total, dtype=torch.float32)
    total = batch_info.global_batch_size
    return 1.0 if total is None else mask.shape[0] / torch.as_tensor(total, dtype=torch.float32)


class SkyRLBackend:
    """A registry loss through SkyRL's PolicyLossRegistry (``own=False``), or SkyRL's own
    ``regular`` / ``gspo`` for the registry loss it implements (``own=True``, a reference)."""

    def __init__(self, own: bool = False) -> None:
        from gmpo_plugins.adapters.skyrl import register_losses

        register_losses()
        self._own = own
        self.name = "skyrl own" if own else "skyrl"

    def supports(self, loss_name: str) -> bool:
        if self._own:
            return OWN.supports(loss_name)
        from gmpo_plugins.adapters.inputs import refusal

        spec = get_loss(loss_name)
        if refusal(spec, "skyrl") is not None or spec.requires:  # a PolicyLossCall carries no optional input
            return False
        try:
            algorithm_fields(loss_name, get_loss(loss_name).resolve({}), width=1)
        except BackendError:
            return False
        return True

    def policy_loss(self, call: PolicyLossCall) -> tuple[torch.Tensor, Mapping[str, Metric]]:
        from skyrl.backends.skyrl_train.utils.ppo_utils import (
            PolicyLossRegistry,
            apply_loss_reduction_to_advantages_minibatch,
        )

        from gmpo_plugins.adapters.skyrl import PREFIX

        call.require_no_rollout_is_weights(self.name)
        policy_loss_type = OWN.loss_type(call.loss_name, self._own, PREFIX)
        fields = algorithm_fields(call.loss_name, call.hparams, width=call.mask.shape[-1])
        config = algorithm_config(policy_loss_type, fields)
        loss_mask = call.mask.to(torch.float32)
        scaled = apply_loss_reduction_to_advantages_minibatch(
            advantages=call.token_advantages(loss_mask),
            loss_mask=loss_mask,
            loss_reduction=config.loss_reduction,
            micro_batch_size=call.mask.shape[0],
            max_seq_len=config.max_seq_len,
        ) * _global_ratio(config.loss_reduction, loss_mask, call.batch_info)
        loss, metrics = PolicyLossRegistry.get(policy_loss_type)(
            call.log_probs, call.old_log_probs, scaled, config=config, loss_mask=loss_mask, rollout_logprobs=None
        )
        loss = loss * call.batch_info.dp_size
        core = strip_prefix(metrics, METRIC_PREFIX)
        if "clip_ratio" in metrics:
            core["clip_frac"] = metrics["clip_ratio"]
        core["policy_loss"] = loss.detach()
        return loss, core


def make_backend() -> SkyRLBackend:
    return SkyRLBackend()


def parity_targets() -> Iterator[ParityTarget]:
    """The adapter, and SkyRL's own regular / gspo as references."""
    return adapter_and_own_targets("skyrl", SkyRLBackend, "PolicyLossRegistry, SkyRL's pre-scaling", OWN)
