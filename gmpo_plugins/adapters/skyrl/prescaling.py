r"""Check, in the driver, that SkyRL's trainer still pre-scales the advantages as ``options`` expects.

The adapter's normalisation rests on SkyRL's trainer dividing each global mini-batch's
advantages by its counts before the workers see them (``options``: token_mean A / M,
sequence_mean A / (N |o_i|), seq_mean_token_sum_norm A / (N L)). The tensors cannot tell:
advantages are constant per row whether scaled or not. A SkyRL that moved the normalisation
into its own losses would have GMPO train on unscaled, length-weighted advantages.

So ``check_prescaling`` runs the installed SkyRL trainer's own code path on a tiny batch
(N = 3 rows of 1, 2 and 4 valid tokens, M = 7): ``RayPPOTrainer._execute_training_step("policy",
data)`` on a trainer object without workers, whose ``dispatch`` records what would be
staged for the workers and stages nothing. For each reduction, what reaches the workers,
turned into the core's advantages by ``options.core_advantages``, must be A / N (A / M for
token_mean); otherwise ``UpstreamDriftError`` naming the SkyRL version and the reduction.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from gmpo_plugins.adapters.skyrl.options import CORE_REDUCTION, TOKEN, core_advantages
from gmpo_plugins.adapters.upstream import TESTED, UpstreamDriftError, framework_version

LENGTHS = (1, 2, 4)
WIDTH = 4
MAX_SEQ_LEN = 8
ADVANTAGES = (1.0, -2.0, 0.5)


class _RecordingDispatch:
    """Stands in for SkyRL's worker dispatch: records the batch that would be staged."""

    def __init__(self) -> None:
        self.staged: Any = None

    def stage_data(self, model: str, data: Any, boundaries: Any) -> list:
        self.staged = data
        return []


def _staged_advantages(trainer_class: type, batch_class: type, loss_reduction: str) -> torch.Tensor:
    """The advantages SkyRL's ``_execute_training_step`` would stage for the policy workers."""
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(WIDTH)] for n in LENGTHS], dtype=torch.float64)
    advantages = torch.tensor(ADVANTAGES, dtype=torch.float64)[:, None] * mask
    data = batch_class({"advantages": advantages, "loss_mask": mask, "response_mask": mask})
    data.metadata = {"policy_mini_batch_boundaries": [(0, len(LENGTHS))]}
    algorithm = SimpleNamespace(advantage_batch_normalize=False, loss_reduction=loss_reduction, max_seq_len=MAX_SEQ_LEN)
    trainer: Any = object.__new__(trainer_class)  # no Ray, no workers: only the method's own logic runs
    trainer.cfg = SimpleNamespace(
        trainer=SimpleNamespace(algorithm=algorithm, micro_train_batch_size_per_gpu=1, update_epochs_per_batch=1)
    )
    trainer.dispatch = _RecordingDispatch()
    trainer._execute_training_step("policy", data)
    if trainer.dispatch.staged is None:
        raise LookupError("_execute_training_step staged nothing for the policy workers")
    return trainer.dispatch.staged["advantages"]


def check_prescaling() -> None:
    """Raise UpstreamDriftError unless the installed SkyRL trainer pre-scales the advantages
    as the adapter expects for every reduction it accepts (module docstring)."""
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.trainer import RayPPOTrainer

    mask = torch.tensor([[t < n for t in range(WIDTH)] for n in LENGTHS])
    rows = torch.tensor(ADVANTAGES, dtype=torch.float64)[:, None] * mask
    for reduction in CORE_REDUCTION:
        count = sum(LENGTHS) if reduction == TOKEN else len(LENGTHS)
        try:
            staged = _staged_advantages(RayPPOTrainer, TrainingInputBatch, reduction)
            length = MAX_SEQ_LEN if reduction == "seq_mean_token_sum_norm" else None
            core, _ = core_advantages(staged, mask, reduction, length)
            ok = torch.allclose(core * mask, rows / count, rtol=1e-12, atol=0)
            found = f"advantages {core.masked_select(mask).tolist()}"
        except Exception as error:  # noqa: BLE001 - any failure of SkyRL's path is the drift reported
            ok, found = False, f"{type(error).__name__}: {error}"
        if not ok:
            raise UpstreamDriftError(
                f"gmpo_plugins: {framework_version('skyrl')} does not pre-scale the advantages the way the "
                f"SkyRL adapter relies on: with loss_reduction={reduction}, the advantages "
                "RayPPOTrainer._execute_training_step hands the policy workers should give "
                f"A / {count} per token once the adapter undoes SkyRL's scaling "
                f"(apply_loss_reduction_to_advantages_minibatch), found {found}. The registry losses would "
                "train on another normalisation, so they are refused; the SkyRL adapter is tested with "
                f"skyrl{TESTED['skyrl'].specifier}"
            )
