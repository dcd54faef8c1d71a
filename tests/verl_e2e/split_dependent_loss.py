"""A deliberately split-dependent loss for the invariance test (test-only; never shipped).

``loss_mode=split_dependent_gmpo`` is gmpo-plugins' ``gmpo`` called with the normalisation
counts of the *micro-batch* instead of verl's ``global_batch_info`` (dp_size 1, the local
number of sequences and tokens): the common mistake of a plain local mean. Accumulated over
k micro-batches its gradient is k times the full-batch one, so the invariance check must
reject it. Imported in every Ray process through ``VERL_USE_EXTERNAL_MODULES``.
"""

from __future__ import annotations

from typing import Any

import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn, register_policy_loss

NAME = "split_dependent_gmpo"


@register_policy_loss(NAME)
def split_dependent_gmpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
):
    info = config.global_batch_info
    saved = dict(info)
    info.update(dp_size=1, global_batch_size=int(log_prob.shape[0]), batch_num_tokens=int(response_mask.sum()))
    try:
        return get_policy_loss_fn("gmpo")(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=response_mask,
            loss_agg_mode=loss_agg_mode,
            config=config,
            rollout_is_weights=rollout_is_weights,
        )
    finally:
        info.clear()
        info.update(saved)
