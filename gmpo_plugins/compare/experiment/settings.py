"""Named loss settings of ``gmpo-plugins compare``: a registry loss at other hyper-parameters.

    grpo_clip_wider   grpo with the ratio clipped to (e^-0.4, e^0.4) = (0.670, 1.492): the
                      same band as GMPO's default log-space clip of +-0.4, the authors'
                      ``grpo_clip_wider`` (callsys/GMPO ``train_zero_math_gmpo.py``, which
                      writes 0.67..1.49): eps_low = 1 - e^-0.4 = 0.3297,
                      eps_high = e^0.4 - 1 = 0.4918

A name of ``--losses`` is a registry loss or one of these; every framework runs a setting
as its registry loss with these hyper-parameters (the backends carry eps_low / eps_high).
"""

from __future__ import annotations

import math
from typing import Any

from gmpo_plugins.core.registry import get_loss

SETTINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo_clip_wider": ("grpo", {"eps_low": 1 - math.exp(-0.4), "eps_high": math.exp(0.4) - 1}),
}


def registry_name(loss: str) -> str:
    """The registry loss behind ``loss`` (a setting's, or ``loss`` itself)."""
    return SETTINGS[loss][0] if loss in SETTINGS else loss


def resolve_loss(loss: str) -> tuple[str, dict[str, Any]]:
    """(registry loss, complete hyper-parameters in core names and units) of ``loss``;
    UnknownLossError for a name that is neither a setting nor a registry loss."""
    name, overrides = SETTINGS.get(loss, (loss, {}))
    return name, get_loss(name).resolve(overrides)
