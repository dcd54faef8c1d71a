"""The built-in losses, registered as the ``builtin`` plugin of the distribution
gmpo-plugins (entry point group ``gmpo_plugins``)."""

from __future__ import annotations

from gmpo_plugins.core.hookspecs import hookimpl
from gmpo_plugins.core.losses.gmpo import GMPO, GMPO_NOCLIP, GMPO_NONORM, GMPO_SEQCLIP
from gmpo_plugins.core.losses.gspo import GSPO
from gmpo_plugins.core.losses.ppo_clip import DAPO, DR_GRPO, GRPO
from gmpo_plugins.core.spec import LossSpec

BUILTIN_LOSSES: tuple[LossSpec, ...] = (GMPO, GMPO_NOCLIP, GMPO_SEQCLIP, GMPO_NONORM, GRPO, DAPO, DR_GRPO, GSPO)


@hookimpl
def gmpo_plugins_losses() -> tuple[LossSpec, ...]:
    """The losses shipped with gmpo-plugins."""
    return BUILTIN_LOSSES
