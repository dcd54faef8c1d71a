"""TRL: ``GRPOTrainer._compute_loss`` (or ``trl.experimental.gmpo.GMPOTrainer._compute_loss``),
the installed code unmodified, on a trainer whose attributes come from a ``GRPOConfig`` (or
``GMPOConfig``) with the fields, set as ``GRPOTrainer.__init__`` sets them. The one part
replaced is the model forward: ``compare.backends.trl_gmpo.TensorTrainer`` returns the
batch's log-probs (the audit has no model).

As TRL's trainer runs it: G = micro-batches per rank accumulation steps
(``current_gradient_accumulation_steps``), ``steps_per_generation`` = G x the optimizer steps
the generation batch spans, ``num_items_in_batch`` = the valid tokens of the whole generation
batch over all ranks, ``accelerator.num_processes`` = the ranks; the loss ``_compute_loss``
returns is the one back-propagated (it divides by G itself); DDP averages the ranks'
gradients. Metrics: ``clip_ratio/*`` -> core names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from gmpo_plugins.adapters.trl.metrics import FROM_TRL
from gmpo_plugins.compare.audit.batches import Part
from gmpo_plugins.compare.audit.translations import Reference
from gmpo_plugins.compare.backends.trl_gmpo import TensorTrainer, completion_inputs

_CONFIGS: dict[tuple, Any] = {}


def trainer_config(call: str, settings: Mapping[str, Any]) -> Any:
    """The ``GRPOConfig`` (``call`` GRPOTrainer) or ``GMPOConfig`` (GMPOTrainer) with ``settings``."""
    key = (call, tuple(sorted(settings.items())))
    if key not in _CONFIGS:
        if call == "GMPOTrainer":
            from trl.experimental.gmpo import GMPOConfig as config_class
        elif call == "GRPOTrainer":
            from trl import GRPOConfig as config_class
        else:
            raise ValueError(f"trl: call must be 'GRPOTrainer' or 'GMPOTrainer', got {call!r}")
        _CONFIGS[key] = config_class(use_cpu=True, report_to="none", **settings)
    return _CONFIGS[key]


class ConfiguredTrainer(TensorTrainer):
    """The attributes ``_compute_loss`` reads, from ``args`` as ``GRPOTrainer.__init__`` sets them."""

    def __init__(self, args: Any, log_probs: torch.Tensor, accumulation: int, num_processes: int) -> None:
        super().__init__(log_probs, accumulation, num_processes)
        self.args = args
        self.loss_type = args.loss_type
        self.epsilon_low = args.epsilon
        self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
        self.importance_sampling_level = args.importance_sampling_level
        self.off_policy_mask_threshold = args.off_policy_mask_threshold
        self.top_entropy_quantile = args.top_entropy_quantile
        self.max_completion_length = args.max_completion_length
        self.beta = args.beta
        self.entropy_coef = args.entropy_coef
        self.use_adaptive_entropy = args.use_adaptive_entropy
        self._entropy_bonus_enabled = self.entropy_coef != 0.0 or self.use_adaptive_entropy
        self.use_vllm = False
        self.vllm_importance_sampling_correction = False
        self.aux_loss_enabled = False
        from trl import GRPOTrainer

        self.get_gamma_weights = GRPOTrainer.get_gamma_weights  # vespo's weight: a static helper reached via self


def micro_loss(reference: Reference, settings: Mapping[str, Any], part: Part) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch through TRL's ``_compute_loss`` (module docstring)."""
    args = trainer_config(reference.call, settings)
    args.steps_per_generation = part.micro * part.generations
    log_probs = part.take(part.log_probs)
    inputs = completion_inputs(
        log_probs, part.take(part.case.old_log_probs), part.take(part.case.advantages), part.take(part.case.mask)
    )
    inputs["num_items_in_batch"] = torch.tensor(part.global_tokens * part.generations)
    trainer = ConfiguredTrainer(args, log_probs, part.micro, part.ranks)
    if reference.call == "GMPOTrainer":
        from trl.experimental.gmpo import GMPOTrainer as trainer_class
    else:
        from trl import GRPOTrainer as trainer_class
    loss = trainer_class._compute_loss(trainer, None, inputs)
    logged = trainer._metrics["train"]
    return loss, {FROM_TRL[key]: float(values[-1]) for key, values in logged.items() if key in FROM_TRL and values}
