"""Register every registry loss into verl's ``POLICY_LOSS_REGISTRY`` without shadowing.

Names (``loss_mode`` values), for each registry loss ``<name>``:

    gmpo_plugins.<name>   always (unambiguous)
    <name>                as well, unless that name is already taken in verl's registry by
                          something that is not ours: a verl built-in (``gspo``, ``vanilla``,
                          ``geo_mean``, ...) or another plugin. verl's ``register_policy_loss``
                          overwrites silently, so the registry is checked first.

Idempotent: entries carrying our marker (``policy_loss.MARKER``) are replaced, so importing
the adapter through both the ``verl.plugins`` entry point and ``external_lib`` /
``VERL_USE_EXTERNAL_MODULES`` registers each name once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

from gmpo_plugins.adapters.verl.policy_loss import MARKER, make_policy_loss
from gmpo_plugins.core.registry import list_losses

logger = logging.getLogger(__name__)

PREFIX = "gmpo_plugins."
STAND_IN = "__gmpo_plugins_unavailable__"
"""``verl_plugin.STAND_IN`` (not imported: importing the entry point module imports this one)."""


@dataclass(frozen=True)
class VerlName:
    """One registry loss as seen from verl: ``prefixed`` always works; ``bare`` is None
    when that name belongs to ``taken_by`` (a verl built-in or another plugin)."""

    loss: str
    prefixed: str
    bare: str | None
    taken_by: str | None


def _owner(fn: Callable) -> str:
    module = getattr(fn, "__module__", None) or "?"
    where = f"{module}.{getattr(fn, '__qualname__', repr(fn))}"
    return f"verl's built-in {where}" if module.split(".")[0] == "verl" else where


def is_ours(fn: Callable) -> bool:
    """True for a verl policy loss built by this adapter."""
    return getattr(fn, MARKER, None) is not None


def replaceable(fn: Callable) -> bool:
    """True for our loss, or for the stand-in ``verl_plugin`` registers when the adapter
    failed to load (``verl_plugin.STAND_IN``)."""
    return is_ours(fn) or hasattr(fn, STAND_IN)


def register_losses(registry: MutableMapping[str, Callable] | None = None) -> list[VerlName]:
    """Register all registry losses into ``registry`` (default: verl's POLICY_LOSS_REGISTRY)
    under the names of the module docstring; returns how each loss was named."""
    if registry is None:
        from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

        registry = POLICY_LOSS_REGISTRY
    names = []
    for spec in list_losses():
        prefixed = PREFIX + spec.name
        current = registry.get(prefixed)
        if current is None or replaceable(current):
            registry[prefixed] = make_policy_loss(spec, prefixed)
        else:
            logger.warning("gmpo_plugins: verl loss_mode %r is taken by %s; not replaced", prefixed, _owner(current))
        current = registry.get(spec.name)
        if current is None or replaceable(current):
            registry[spec.name] = make_policy_loss(spec, spec.name)
            names.append(VerlName(spec.name, prefixed, spec.name, None))
        else:
            names.append(VerlName(spec.name, prefixed, None, _owner(current)))
    return names
