"""The TRL backend of ``gmpo-plugins compare`` / ``parity``: registry losses through the TRL
adapter's call site, ``RegistryGRPOTrainer._compute_loss``.

For each mini-batch the backend runs that method (the adapter's code, unmodified) on a
stand-in for the trainer whose ``_get_per_token_logps_and_entropies`` returns the given
log-probs: the compare trainer owns the model, so TRL's model forward is the one part
replaced. Everything the adapter translates is exercised: GRPOConfig -> hyper-parameters
(``adapters.trl.options``), TRL's accumulation -> ``BatchInfo``
(``adapters.trl.normalisation``) and the metric names (``adapters.trl.metrics``).
Translation (the inverse of ``adapters.trl.options``):

    eps_low, eps_high, kl_beta -> GRPOConfig.epsilon, epsilon_high, beta
    norm_length                -> GRPOConfig.max_completion_length
    other hyper-parameters     -> loss_hparams
    BatchInfo(P, N, M), b rows -> accumulation steps G = N / (b * P), steps_per_generation
                                  = G, num_items_in_batch = M (so TRL's window holds N
                                  sequences and M tokens), accelerator.num_processes = P
    metrics                    <- TRL names back to core names (clip_ratio/low_mean ->
                                  clip_frac_low, ...); policy_loss divided by G again

Metrics are those of this process (the stand-in's collectives do not communicate).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, cast

import torch

from gmpo_plugins.adapters.trl.metrics import FROM_TRL
from gmpo_plugins.compare.backends.base import Metric, PolicyLossCall
from gmpo_plugins.compare.backends.trl_gmpo import TensorTrainer, completion_inputs
from gmpo_plugins.core.registry import get_loss


def trl_settings(loss_name: str, hparams: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(GRPOConfig fields, loss_hparams) that carry ``hparams`` of registry loss ``loss_name``."""
    from gmpo_plugins.adapters.trl.options import field_for

    spec = get_loss(loss_name)
    fields: dict[str, Any] = {"use_bias_correction_kl": False}
    extra: dict[str, Any] = {}
    for name, value in hparams.items():
        setting = field_for(spec, name, value)
        if setting is not None:
            fields[setting[0]] = setting[1]
        else:
            extra[name] = value
    return fields, extra


class _TrainerStandIn(TensorTrainer):
    """What ``RegistryGRPOTrainer._compute_loss`` reads from its trainer, besides the tensor trainer's."""

    def __init__(
        self, args: Any, spec: Any, loss_hparams: dict, log_probs: torch.Tensor, accumulation: float, num_processes: int
    ) -> None:
        from gmpo_plugins.adapters.trl.trainer import RegistryGRPOTrainer

        super().__init__(log_probs, accumulation, num_processes)
        self.args = args
        self.loss_spec = spec
        self.loss_hparams = loss_hparams
        self._optional_inputs = frozenset(spec.inputs_for(loss_hparams))
        self.beta = args.beta
        self.use_vllm = False
        self.vllm_importance_sampling_correction = False
        self.aux_loss_enabled = False
        self._proof = None  # no training step: nothing to prove (RegistryGRPOTrainer.training_step)
        self._rollout_is_weights = types.MethodType(RegistryGRPOTrainer._rollout_is_weights, self)
        self._reads = types.MethodType(RegistryGRPOTrainer._reads, self)
        self._group_ids = types.MethodType(RegistryGRPOTrainer._group_ids, self)  # None: no loss here reads groups


class TrlBackend:
    """Registry losses through ``RegistryGRPOTrainer._compute_loss`` (module docstring)."""

    name = "trl"

    def __init__(self) -> None:
        self._settings: dict[tuple, tuple[Any, dict]] = {}

    def supports(self, loss_name: str) -> bool:
        """Whether ``policy_loss`` can call the loss: one that reads no optional input (a
        ``PolicyLossCall`` carries neither rewards nor entropy, which the adapter takes from
        TRL's batch and forward)."""
        from gmpo_plugins.adapters.inputs import refusal

        return refusal(get_loss(loss_name), "trl", caller="the TRL compare backend") is None

    def _config(self, loss_name: str, hparams: Mapping[str, Any]) -> tuple[Any, dict]:
        key = (loss_name, tuple(sorted(hparams.items(), key=lambda item: item[0])))
        if key not in self._settings:
            from trl import GRPOConfig

            from gmpo_plugins.adapters.trl.options import loss_hparams_from_args

            fields, extra = trl_settings(loss_name, hparams)
            args = GRPOConfig(use_cpu=True, report_to="none", **fields)
            self._settings[key] = (args, loss_hparams_from_args(args, get_loss(loss_name), extra))
        return self._settings[key]

    def policy_loss(self, call: PolicyLossCall) -> tuple[torch.Tensor, Mapping[str, Metric]]:
        from gmpo_plugins.adapters.trl.trainer import RegistryGRPOTrainer

        call.require_no_rollout_is_weights(self.name)
        args, loss_hparams = self._config(call.loss_name, call.hparams)
        rows = call.mask.shape[0]
        info = call.batch_info
        processes = info.dp_size
        sequences = rows * processes if info.global_batch_size is None else info.global_batch_size
        tokens = call.mask.sum() * processes if info.global_num_tokens is None else info.global_num_tokens
        accumulation = float(sequences) / (rows * processes)
        args.steps_per_generation = accumulation
        inputs = completion_inputs(call.log_probs, call.old_log_probs, call.advantages, call.mask)
        inputs["num_items_in_batch"] = torch.as_tensor(tokens, device=call.log_probs.device)
        stand_in = _TrainerStandIn(
            args, get_loss(call.loss_name), loss_hparams, call.log_probs, accumulation, processes
        )
        # the stand-in carries every attribute _compute_loss reads (see _TrainerStandIn)
        loss = RegistryGRPOTrainer._compute_loss(cast(RegistryGRPOTrainer, stand_in), None, inputs)
        metrics: dict[str, Metric] = {}
        for name, values in stand_in._metrics["train"].items():
            if name != "entropy":
                metrics[FROM_TRL.get(name, name)] = values[-1]
        metrics["policy_loss"] = metrics["policy_loss"] / accumulation
        return loss, metrics


def make_backend() -> TrlBackend:
    """This module's backend factory (the ``trl`` framework)."""
    return TrlBackend()
