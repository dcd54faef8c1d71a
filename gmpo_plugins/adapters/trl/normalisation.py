"""TRL's batching -> ``BatchInfo``, so that a registry loss is normalised over the whole
accumulated, data-parallel batch.

GRPOTrainer calls ``_compute_loss`` once per micro-batch of ``B`` local sequences
(``per_device_train_batch_size``), sums the gradients of ``G`` micro-batches
(``current_gradient_accumulation_steps``) before each optimizer step, and data
parallelism averages the gradients of ``P`` processes (``accelerator.num_processes``).
We pass

    dp_size           = P
    global_batch_size = B * G * P                     sequences per optimizer step
    global_num_tokens = n * G / S      (train)        valid tokens per optimizer step
                      = n              (eval)

with ``n = inputs["num_items_in_batch"]`` (valid tokens of the whole generation batch,
summed over processes, as TRL computes it) and ``S = args.steps_per_generation``. A
micro-batch loss ``sum_i L_i / N * P`` then sums over the G micro-batches and averages
over the P processes to the mean over the B*G*P sequences: the gradient of TRL's own
``mean_i L_i / G`` for GMPO/GRPO (equal micro-batch sizes), and exactly TRL's
``sum / (n / P * G / S)`` for token-mean losses (DAPO). In eval there is no
accumulation (G = 1), as in TRL.

Difference by design: a sequence with no valid token (e.g. ``mask_truncated_completions``)
counts in N, as in TRL, but adds nothing to the loss value, whereas TRL's GMPOTrainer adds
its constant ``-A_i * exp(0)`` (zero gradient) to the logged loss.
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.types import BatchInfo


def trl_batch_info(
    *,
    local_sequences: int,
    accumulation_steps: int,
    num_processes: int,
    num_items_in_batch: int | torch.Tensor,
    steps_per_generation: int,
    training: bool,
) -> BatchInfo:
    """``BatchInfo`` for one GRPOTrainer micro-batch (formulas in the module docstring)."""
    accumulation = accumulation_steps if training else 1
    tokens = num_items_in_batch * accumulation / steps_per_generation if training else num_items_in_batch
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.clamp(min=1.0)
    else:
        tokens = max(tokens, 1.0)
    return BatchInfo(
        dp_size=num_processes,
        global_batch_size=local_sequences * accumulation * num_processes,
        global_num_tokens=tokens,
    )
