"""Where a patched OpenRLHF ``PolicyLoss`` instance keeps the registry loss it computes.

``patch`` sets ``instance.__dict__[PLAN]`` to the instance's plan when the requested
``policy_loss_type`` is a registry loss, and leaves it unset for OpenRLHF's own losses;
``logged_metrics`` and ``visibility`` read it.
"""

from __future__ import annotations

from typing import Any

PLAN = "_gmpo_plugins_plan"


def registry_plan(policy_loss: Any) -> Any:
    """The registry loss plan of ``policy_loss`` (a ``PolicyLoss`` instance), None for OpenRLHF's own."""
    return getattr(policy_loss, "__dict__", {}).get(PLAN)
