"""Third-party GMPO implementations used as parity references (kind "reference").

verl geo_mean   ``verl.trainer.ppo.core_algos.get_policy_loss_fn("geo_mean")`` called as
                verl's actor calls it: (old_log_prob, log_prob, advantages (B, T),
                response_mask, loss_agg_mode, ActorConfig, rollout_is_weights). Only the
                function: verl's actor-side loss scaling is not applied. It averages over
                the rows of the micro-batch it is given (``torch.mean``), so split
                micro-batches do not accumulate to the whole-batch gradient; it has no
                overflow guard; its clip fractions count every clamped token on either
                side (verl #5614, #7913, #7916). Metric names are translated to core names.

verl gspo       ``get_policy_loss_fn("gspo")`` called the same way with seq-mean-token-mean and
                ``global_batch_info`` (so splits accumulate). It clamps the log sequence ratio at
                +10 (no lower bound) where the core guards each token at +-20, and reports only
                a high clip fraction.

Both verl targets take rollout IS weights (parity's ``is_weights`` case): geo_mean weights a
sequence by the geometric mean of its token weights, gspo each token's gradient by its own
weight; the core's defaults (``rollout_is_aggregation``) are the same.

trl GMPOTrainer ``trl.experimental.gmpo.GMPOTrainer._compute_loss`` itself, run on the given
                tensors by ``compare.backends.trl_gmpo.TrlGMPOBackend`` (a stand-in trainer
                returns them as the model's log-probs; G = N / b accumulation steps, as
                TRL's trainer divides each micro-batch mean). It counts rows without a valid
                token in its mean with their constant -A_i, has no overflow guard, and
                computes in the input dtype (bfloat16 stays bfloat16). Clip metrics and,
                elsewhere, gradients equal the core's (tests/trl/test_compare_backend.py).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import torch

from gmpo_plugins.compare.backends.base import ParityTarget, PolicyLossCall

VERL_METRICS = {
    "actor/pg_clipfrac": "clip_frac_high",
    "actor/pg_clipfrac_lower": "clip_frac_low",
    "actor/ppo_kl": "ppo_kl",
}


class VerlPolicyLoss:
    """A verl built-in policy loss behind the ``LossBackend`` interface (module docstring)."""

    accepts_rollout_is_weights = True

    def __init__(self, verl_name: str, loss_name: str, loss_agg_mode: str, global_counts: bool) -> None:
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        self.name = f"verl {verl_name}"
        self._fn = get_policy_loss_fn(verl_name)
        self._loss_name = loss_name
        self._agg = loss_agg_mode
        self._global_counts = global_counts

    def supports(self, loss_name: str) -> bool:
        return loss_name == self._loss_name

    def policy_loss(self, call: PolicyLossCall) -> tuple[torch.Tensor, Mapping[str, float]]:
        from verl.workers.config import ActorConfig

        rows = int(call.mask.shape[0])
        counts: dict[str, Any] = {}
        if self._global_counts:
            counts = {
                "dp_size": call.batch_info.dp_size,
                "global_batch_size": call.batch_info.global_batch_size,
                "batch_num_tokens": call.batch_info.global_num_tokens,
            }
        config = ActorConfig(
            strategy="fsdp",
            rollout_n=1,
            ppo_mini_batch_size=rows,
            ppo_micro_batch_size_per_gpu=rows,
            clip_ratio_low=call.hparams["eps_low"],
            clip_ratio_high=call.hparams["eps_high"],
            global_batch_info=counts,
        )
        dtype = call.log_probs.dtype
        token_advantages = call.advantages[:, None].expand_as(call.log_probs).to(dtype)
        weights = None if call.rollout_is_weights is None else call.rollout_is_weights.to(dtype)
        loss, metrics = self._fn(
            call.old_log_probs, call.log_probs, token_advantages, call.mask.to(dtype), self._agg, config, weights
        )
        return loss, {VERL_METRICS[key]: value for key, value in metrics.items() if key in VERL_METRICS}


def verl_geo_mean() -> VerlPolicyLoss:
    """verl's ``geo_mean`` (GMPO as verl ships it): its own local mean, no global counts."""
    return VerlPolicyLoss("geo_mean", "gmpo", "token-mean", global_counts=False)


def verl_gspo() -> VerlPolicyLoss:
    """verl's ``gspo`` with seq-mean-token-mean and the global counts."""
    return VerlPolicyLoss("gspo", "gspo", "seq-mean-token-mean", global_counts=True)


def reference_targets() -> tuple[list, list[tuple[str, str]]]:
    """(importable reference targets, skipped (label, reason))."""
    targets, skipped = [], []
    if importlib.util.find_spec("verl") is None:
        skipped.append(("verl geo_mean / gspo", "verl is not installed here"))
    else:
        note = "function only, see references.py"
        for backend in (verl_geo_mean(), verl_gspo()):
            targets.append(ParityTarget(backend.name, "reference", backend, note=note))
    if importlib.util.find_spec("trl") is None:
        skipped.append(("trl GMPOTrainer", "trl is not installed here"))
    else:
        from gmpo_plugins.compare.backends.trl_gmpo import TrlGMPOBackend

        targets.append(ParityTarget(TrlGMPOBackend.name, "reference", TrlGMPOBackend(), note="TRL's own _compute_loss"))
    return targets, skipped
