"""gmpo-plugins: GMPO and related policy losses for LLM reinforcement learning, one
implementation plugged into verl, OpenRLHF and TRL.

    from gmpo_plugins import BatchInfo, LossInputs, get_loss

    out = get_loss("gmpo")(LossInputs(log_probs, old_log_probs, advantages, mask),
                           BatchInfo(dp_size=1, global_batch_size=64))
    out.loss.backward(); out.metrics["clip_frac"]

Public API: the names of ``__all__`` here, and ``gmpo_plugins.plugin`` for writing a loss
plugin. The subpackages (``core``, ``adapters``, ``compare``, ``bench``, ``cli``) are
internal; each adapter documents its framework-facing entry points in its own docstring.
"""

from gmpo_plugins.core.fused_linear import FusedLinearOutput, fused_linear_loss
from gmpo_plugins.core.hookspecs import hookimpl
from gmpo_plugins.core.registry import (
    LossNameCollisionError,
    PluginLoadWarning,
    UnknownLossError,
    get_loss,
    list_losses,
)
from gmpo_plugins.core.spec import LossResultError, LossSpec, NoGradientWarning
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput

__version__ = "0.1.0"

__all__ = [
    "BatchInfo",
    "FusedLinearOutput",
    "LossInputs",
    "LossNameCollisionError",
    "LossOutput",
    "LossResultError",
    "LossSpec",
    "NoGradientWarning",
    "PluginLoadWarning",
    "UnknownLossError",
    "fused_linear_loss",
    "get_loss",
    "hookimpl",
    "list_losses",
]
