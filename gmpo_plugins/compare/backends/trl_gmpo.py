"""TRL's own GMPO loss math on given tensors: the reference for parity checks.

``trl_gmpo_reference`` runs ``trl.experimental.gmpo.GMPOTrainer._compute_loss`` itself
(the installed TRL's code, unmodified) with a stand-in for the trainer whose
``_get_per_token_logps_and_entropies`` returns the given ``log_probs`` instead of running
a model. Single process, train mode, G accumulation steps, no entropy mask, so the
result is TRL's

    loss = mean_i [ -A_i * exp(sum_t m_t l_t / max(1, |o_i|)) + beta * mean_t k3_t ] / G

over all B rows (an empty row contributes -A_i), with TRL's clip metrics.
``TrlGMPOBackend`` wraps it in the ``LossBackend`` shape of ``gmpo_plugins.compare``
(a ``gmpo-plugins parity`` reference target, listed by ``compare.parity.references``).
Metrics are returned under the core's names so they compare directly:
``clip_frac_low`` (TRL clip_ratio/low_mean), ``clip_frac_high`` (high_mean),
``clip_frac`` (region_mean), ``kl`` (when beta != 0). TRL logs no policy loss.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from types import SimpleNamespace

import torch

from gmpo_plugins.adapters.trl.metrics import FROM_TRL
from gmpo_plugins.compare.backends.base import Metric, PolicyLossCall
from gmpo_plugins.core.types import LossOutput

# TRL logs its KL term as "kl", the core's name too
REFERENCE_METRICS = {**FROM_TRL, "kl": "kl"}


class SingleProcessAccelerator:
    """The accelerator collectives a trainer's ``_compute_loss`` uses, for one process
    (``num_processes`` is what the loss normalisation reads)."""

    def __init__(self, num_processes: int = 1) -> None:
        self.num_processes = num_processes

    @staticmethod
    def reduce(tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return tensor

    @staticmethod
    def gather(tensor: torch.Tensor) -> torch.Tensor:
        return tensor


class TensorTrainer:
    """Stands in for a TRL trainer whose ``_compute_loss`` runs on given tensors: the model
    forward returns ``log_probs`` (B, T) and zero entropies; train mode, ``accumulation_steps``,
    one process's collectives over ``num_processes``, TRL's metric store."""

    def __init__(self, log_probs: torch.Tensor, accumulation_steps: float, num_processes: int = 1) -> None:
        self._log_probs = log_probs
        self.current_gradient_accumulation_steps = accumulation_steps
        self.model = SimpleNamespace(training=True)
        self.accelerator = SingleProcessAccelerator(num_processes)
        self._metrics: dict[str, defaultdict[str, list[float]]] = {
            "train": defaultdict(list),
            "eval": defaultdict(list),
        }

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        return self._log_probs, torch.zeros_like(self._log_probs.detach()), None


def completion_inputs(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The batch a TRL ``_compute_loss`` reads, for a ``TensorTrainer``: one dummy prompt
    token, B zero completion ids of width T (the stand-in ignores them), ``mask`` (B, T) as
    int64, ``advantages`` (B,) and ``old_log_probs`` (B, T) as given."""
    rows, length = mask.shape
    device = log_probs.device
    return {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long, device=device),
        "prompt_mask": torch.ones(rows, 1, dtype=torch.long, device=device),
        "completion_ids": torch.zeros(rows, length, dtype=torch.long, device=device),
        "completion_mask": mask.long(),
        "advantages": advantages,
        "old_per_token_logps": old_log_probs,
    }


class _GMPOStandIn(TensorTrainer):
    """A GMPOTrainer's attributes its ``_compute_loss`` reads, besides the tensor trainer's."""

    def __init__(
        self, log_probs: torch.Tensor, eps_low: float, eps_high: float, beta: float, accumulation_steps: float
    ) -> None:
        super().__init__(log_probs, accumulation_steps)
        self.epsilon_low = eps_low
        self.epsilon_high = eps_high
        self.beta = beta
        self.top_entropy_quantile = 1.0


def trl_gmpo_reference(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.4,
    eps_high: float = 0.4,
    beta: float = 0.0,
    ref_log_probs: torch.Tensor | None = None,
    accumulation_steps: float = 1,
) -> LossOutput:
    """TRL GMPOTrainer's loss (differentiable w.r.t. ``log_probs``) and clip/KL metrics.

    log_probs, old_log_probs, mask, ref_log_probs (B, T); advantages (B,); eps in log space;
    accumulation_steps: TRL's ``current_gradient_accumulation_steps`` (the loss is divided by it).
    Raises ImportError when trl (>= 1.7, with trl.experimental.gmpo) is not installed.
    """
    from trl.experimental.gmpo import GMPOTrainer

    if beta != 0.0 and ref_log_probs is None:
        raise ValueError("ref_log_probs: required when beta != 0")
    if not accumulation_steps > 0:
        raise ValueError(f"accumulation_steps: expected a number > 0, got {accumulation_steps!r}")
    inputs = completion_inputs(log_probs, old_log_probs, advantages, mask)
    if ref_log_probs is not None:
        inputs["ref_per_token_logps"] = ref_log_probs
    stand_in = _GMPOStandIn(log_probs, eps_low, eps_high, beta, accumulation_steps)
    loss = GMPOTrainer._compute_loss(stand_in, None, inputs)
    logged = stand_in._metrics["train"]
    metrics = {  # TRL logs Python floats; float64 keeps them exact
        ours: torch.tensor(logged[theirs][-1], dtype=torch.float64)
        for theirs, ours in REFERENCE_METRICS.items()
        if logged[theirs]
    }
    return LossOutput(loss=loss, metrics=metrics)


class TrlGMPOBackend:
    """TRL's GMPO as a ``gmpo_plugins.compare`` loss backend (supports ``"gmpo"`` only).

    A micro-batch of b rows out of ``batch_info.global_batch_size`` = N over P =
    ``dp_size`` processes is called with G = N / (b * P) accumulation steps, as TRL's
    trainer would accumulate G equal micro-batches per process; eps_low/eps_high come
    from the gmpo hyper-parameters (log space).
    """

    name = "trl GMPOTrainer"

    def supports(self, loss_name: str) -> bool:
        return loss_name == "gmpo"

    def policy_loss(self, call: PolicyLossCall) -> tuple[torch.Tensor, Mapping[str, Metric]]:
        if call.loss_name != "gmpo":
            raise ValueError(f"loss_name: TRL's GMPOTrainer computes only 'gmpo', got {call.loss_name!r}")
        call.require_no_rollout_is_weights(self.name)
        rows, processes = call.mask.shape[0], call.batch_info.dp_size
        total = rows * processes if call.batch_info.global_batch_size is None else call.batch_info.global_batch_size
        out = trl_gmpo_reference(
            call.log_probs,
            call.old_log_probs,
            call.advantages,
            call.mask,
            eps_low=call.hparams["eps_low"],
            eps_high=call.hparams["eps_high"],
            accumulation_steps=float(total) / (rows * processes),
        )
        return out.loss, out.metrics
