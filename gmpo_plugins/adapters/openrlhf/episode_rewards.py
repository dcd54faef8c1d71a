"""Each sample's reward, from the experience OpenRLHF trains on to a registry loss that reads it.

OpenRLHF 0.11's ``PolicyLoss.forward`` gets no rewards, but the ``Experience`` micro-batch that
``ActorPPOTrainer.training_step(experience, ...)`` trains on carries them: ``experience.rewards``
(B,), each sample's reward as the reward model or function gave it (``experience_maker``: the raw
rewards its advantage estimator starts from; the KL shaping and ``--reward.clip_range`` act on a
copy). ``training_step`` is wrapped so that, while it runs, ``current_rewards`` returns them; the
patched PolicyLoss passes them as ``LossInputs.rewards`` (B,) to a loss that reads them (``topr``,
the ``nll_coef`` term), and only then:

    rewards (B,) = experience.rewards[b], row b of the micro-batch's log-probs (B, A)

A loss that reads rewards called outside ``training_step`` (no experience), or on rows that are not
one sample each (packed samples), raises ``OpenRLHFConfigError`` naming the reason.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from gmpo_plugins.adapters.openrlhf.options import OpenRLHFConfigError

_PATCHED = "__gmpo_plugins_episode_rewards__"
_rewards: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("gmpo_openrlhf_rewards")


def current_rewards(rows: int, loss: str) -> torch.Tensor:
    """The rewards (``rows``,) of the experience ``training_step`` trains on now, for ``loss``."""
    rewards = _rewards.get(None)
    if rewards is None:
        raise OpenRLHFConfigError(
            f"gmpo_plugins: --actor.policy_loss_type {loss} reads each sample's reward, which the adapter takes from "
            "the Experience of ActorPPOTrainer.training_step; this PolicyLoss call ran outside it, or its "
            "experience has no rewards"
        )
    if rewards.dim() != 1 or rewards.shape[0] != rows:
        raise OpenRLHFConfigError(
            f"gmpo_plugins: --actor.policy_loss_type {loss} reads each sample's reward, one per row, and the "
            f"experience holds {tuple(rewards.shape)} rewards for {rows} rows (packed samples, "
            "--ds.packing_samples, put several samples in one row): train without packing"
        )
    return rewards


def rewarding_training_step(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ActorPPOTrainer.training_step`` during which ``current_rewards`` gives ``experience.rewards``."""

    @functools.wraps(original)
    def training_step(self: Any, experience: Any, *args: Any, **kwargs: Any) -> Any:
        token = _rewards.set(getattr(experience, "rewards", None))
        try:
            return original(self, experience, *args, **kwargs)
        finally:
            _rewards.reset(token)

    setattr(training_step, _PATCHED, True)
    return training_step


def patch_training_step(module: ModuleType) -> None:
    """Wrap ``module.ActorPPOTrainer.training_step`` (``openrlhf.trainer.ray.ppo_actor``) by
    ``rewarding_training_step``; idempotent. A module without that method is left alone."""
    trainer = getattr(module, "ActorPPOTrainer", None)
    original = getattr(trainer, "training_step", None)
    if trainer is not None and original is not None and not getattr(original, _PATCHED, False):
        trainer.training_step = rewarding_training_step(original)
