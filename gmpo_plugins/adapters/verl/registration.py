"""Register every registry loss into verl's ``POLICY_LOSS_REGISTRY`` without shadowing.

Names (``loss_mode`` values), for each registry loss ``<name>``:

    gmpo_plugins.<name>   always (unambiguous)
    <name>                as well, unless that name is already taken in verl's registry by
                          something that is not ours: a verl built-in (``gspo``, ``vanilla``,
                          ``geo_mean``, ...) or another plugin. verl's ``register_policy_loss``
                          overwrites silently, so the registry is checked first.

A name the registry refuses (claimed by two distributions, ``core.registry``) is registered
too, bare where free and prefixed, as a stand-in that raises the registry's
``LossNameCollisionError`` naming both distributions: asking for it fails loudly, every
other loss_mode works.

Idempotent: entries carrying our marker (``policy_loss.MARKER``) are replaced, so importing
the adapter through both the ``verl.plugins`` entry point and ``external_lib`` /
``VERL_USE_EXTERNAL_MODULES`` registers each name once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

from gmpo_plugins.adapters.load_failure import STAND_IN, stand_in
from gmpo_plugins.adapters.names import PREFIX
from gmpo_plugins.adapters.upstream import warn_if_untested
from gmpo_plugins.adapters.verl.policy_loss import MARKER, make_policy_loss
from gmpo_plugins.core.registry import LossNameCollisionError, list_losses, refused_losses

logger = logging.getLogger(__name__)


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
    """True for our loss, or for a stand-in (``load_failure.STAND_IN``): the one ``verl_plugin``
    registers when the adapter failed to load, or a refused name's."""
    return is_ours(fn) or hasattr(fn, STAND_IN)


def register_losses(registry: MutableMapping[str, Callable] | None = None) -> list[VerlName]:
    """Register all registry losses into ``registry`` (default: verl's POLICY_LOSS_REGISTRY)
    under the names of the module docstring; returns how each loss was named."""
    if registry is None:
        from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

        registry = POLICY_LOSS_REGISTRY
    warn_if_untested("verl")
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
    for loss, message in refused_losses().items():
        for name in (PREFIX + loss, loss):
            current = registry.get(name)
            if current is None or replaceable(current):
                registry[name] = stand_in(name, LossNameCollisionError(message))
    return names
