"""Batches and SkyRL's own pre-scaling/worker arithmetic, shared by the SkyRL tests."""

from __future__ import annotations

from typing import Any

import torch

from gmpo_plugins.adapters.skyrl.options import CORE_REDUCTION
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import BatchInfo, LossInputs

LENGTHS = (12, 7, 0, 3, 1, 12, 9, 5)
WIDTH = 12
ADVANTAGES = (1.3, -0.7, 0.9, 0.0, -1.5, 0.4, -0.2, 2.0)


def make_batch(spread: float = 0.3, dtype: torch.dtype = torch.float64, seed: int = 7) -> dict[str, torch.Tensor]:
    """A global mini-batch in SkyRL's layout: B = 8 rows (one empty), T = 12, advantages of
    both signs and a zero, per token and zero on padding (SkyRL's GRPO estimator's layout)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(LENGTHS)
    mask = (torch.arange(WIDTH)[None, :] < lengths[:, None]).to(dtype)
    old = -(torch.rand(len(LENGTHS), WIDTH, generator=generator, dtype=torch.float64) * 3.0 + 0.05)
    new = old + spread * torch.randn(len(LENGTHS), WIDTH, generator=generator, dtype=torch.float64)
    rollout = old + 0.2 * torch.randn(len(LENGTHS), WIDTH, generator=generator, dtype=torch.float64)
    scores = torch.tensor(ADVANTAGES, dtype=torch.float64)
    return {
        "log_probs": new.to(dtype),
        "old_log_probs": old.to(dtype),
        "rollout_logprobs": rollout.to(dtype),
        "scores": scores.to(dtype),
        "advantages": (scores[:, None] * mask).to(dtype),
        "loss_mask": mask,
    }


def algorithm_config(policy_loss_type: str, loss_reduction: str, **fields: Any):
    """SkyRL's ``AlgorithmConfig`` as its worker passes it (``cfg.trainer.algorithm``)."""
    from skyrl.train.config import AlgorithmConfig

    fields.setdefault("max_seq_len", WIDTH + 4 if loss_reduction == "seq_mean_token_sum_norm" else None)
    return AlgorithmConfig(policy_loss_type=policy_loss_type, loss_reduction=loss_reduction, **fields)


def skyrl_step(
    fn, batch: dict[str, torch.Tensor], config, *, dp_size: int = 1, micro_batches: int = 1, rollout: bool = False
):
    """SkyRL's arithmetic for one global mini-batch: the trainer's
    ``apply_loss_reduction_to_advantages_minibatch`` on the whole mini-batch, rows sharded
    over ``dp_size`` ranks, each shard split into ``micro_batches``; each micro-batch's
    loss multiplied by dp_size and back-propagated (as ``_forward_backward_micro``), the
    ranks' gradients averaged (the DP all-reduce). Returns (sum of the micro-batch losses
    (the loss the mini-batch optimises), gradient w.r.t. log_probs (B, T) float64)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import apply_loss_reduction_to_advantages_minibatch

    rows = batch["log_probs"].shape[0]
    per_rank = rows // dp_size
    scaled = apply_loss_reduction_to_advantages_minibatch(
        advantages=batch["advantages"],
        loss_mask=batch["loss_mask"],
        loss_reduction=config.loss_reduction,
        micro_batch_size=per_rank // micro_batches,
        max_seq_len=config.max_seq_len or WIDTH,
    )
    grad = torch.zeros(batch["log_probs"].shape, dtype=torch.float64)
    total = 0.0
    for rank_rows in torch.arange(rows).chunk(dp_size):
        leaf = batch["log_probs"][rank_rows].clone().requires_grad_(True)
        for local in torch.arange(len(rank_rows)).chunk(micro_batches):
            index = rank_rows[local]
            loss, _ = fn(
                leaf[local],
                batch["old_log_probs"][index],
                scaled[index],
                config=config,
                loss_mask=batch["loss_mask"][index],
                rollout_logprobs=batch["rollout_logprobs"][index] if rollout else None,
            )
            (loss * dp_size).backward()
            total += float(loss.detach())
        grad[rank_rows] = leaf.grad.double() / dp_size  # the all-reduce averages over ranks
    return total, grad


def core_step(
    loss_name: str,
    batch: dict[str, torch.Tensor],
    hparams: dict[str, Any],
    rollout_is_weights: torch.Tensor | None = None,
    rollout_log_probs: torch.Tensor | None = None,
):
    """The core on the whole mini-batch, with the counts a framework passes
    (global_batch_size = every row, global_num_tokens = every valid token)."""
    log_probs = batch["log_probs"].clone().requires_grad_(True)
    mask = batch["loss_mask"] != 0
    info = BatchInfo(dp_size=1, global_batch_size=mask.shape[0], global_num_tokens=int(mask.sum()))
    inputs = LossInputs(
        log_probs,
        batch["old_log_probs"],
        batch["scores"],
        mask,
        rollout_log_probs=rollout_log_probs,
        rollout_is_weights=rollout_is_weights,
    )
    out = get_loss(loss_name)(inputs, info, **hparams)
    out.loss.backward()
    return float(out.loss.detach()), log_probs.grad.double(), out.metrics


def core_hparams(loss_name: str, config) -> dict[str, Any]:
    """What the config means in core terms, written out independently of the adapter."""
    spec = get_loss(loss_name)
    params: dict[str, Any] = {}
    if "eps_low" in spec.defaults and spec.defaults["eps_low"] is None:  # cispo: SkyRL's own offsets
        params["eps_high"] = config.cispo.cispo_eps_clip_high
        low = config.cispo.cispo_eps_clip_low
        # no lower clip at SkyRL's default low (0.3's 0.0 by the adapter's convention; 0.4's 1.0,
        # a bound at 0) and at any low >= 1 (a bound <= 0, which no ratio reaches)
        if low != type(config)().cispo.cispo_eps_clip_low and low < 1.0:
            params["eps_low"] = low
    elif "eps_low" in spec.defaults:
        params.update(eps_low=config.eps_clip_low, eps_high=config.eps_clip_high)
    if "tau_pos" in spec.defaults:
        params.update(tau_pos=config.sapo.tau_pos, tau_neg=config.sapo.tau_neg)
    if "delta_low" in spec.defaults:
        params.update(delta_low=config.dppo.delta_low, delta_high=config.dppo.delta_high)
    if "reduction" in spec.defaults:
        params["reduction"] = CORE_REDUCTION[config.loss_reduction]
        if spec.reductions == ("seq-mean-token-sum",):  # luspo: sequence_mean, token sums per sequence
            params["reduction"] = "seq-mean-token-sum"
        if config.loss_reduction == "seq_mean_token_sum_norm":
            params["norm_length"] = config.max_seq_len
    return params
