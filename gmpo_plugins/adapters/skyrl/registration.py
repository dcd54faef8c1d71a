"""Register every registry loss into SkyRL's ``PolicyLossRegistry`` without shadowing.

Names (``trainer.algorithm.policy_loss_type`` values), for each registry loss ``<name>``:

    gmpo_plugins.<name>   always (unambiguous)
    <name>                as well, unless SkyRL's registry already holds that name for
                          something that is not ours: a SkyRL built-in (``gspo``,
                          ``regular``, ...) or another user's loss

Before registering, ``register_losses`` checks that the installed SkyRL trainer pre-scales the
advantages as the adapter relies on (``prescaling``; UpstreamDriftError otherwise) and warns
once when SkyRL is outside the tested range. A loss name the registry refuses (claimed by two
distributions) is registered as well: SkyRL then calls it and gets the registry's
``LossNameCollisionError`` naming both distributions, while every other loss works.

SkyRL's ``register`` raises on a taken name, so names are checked first; names already
holding our loss are left as they are (calling ``register_losses`` twice is harmless).
When Ray is initialised, SkyRL's ``register`` also stores each function in its named
registry actor, from which every worker's ``PolicyLossRegistry.get`` fetches it; when Ray
is started later, SkyRL's ``initialize_ray`` (``sync_registries``) pushes them there.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gmpo_plugins.adapters.names import PREFIX
from gmpo_plugins.adapters.skyrl.policy_loss import SkyRLPolicyLoss
from gmpo_plugins.adapters.skyrl.prescaling import check_prescaling
from gmpo_plugins.adapters.upstream import warn_if_untested
from gmpo_plugins.core.registry import list_losses, refused_losses

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SkyRLName:
    """One registry loss as seen from SkyRL: ``prefixed`` always works; ``bare`` is None when
    that name belongs to ``taken_by`` (a SkyRL built-in or another registration)."""

    loss: str
    prefixed: str
    bare: str | None
    taken_by: str | None


def is_ours(fn: Any) -> bool:
    """True for a SkyRL policy loss built by this adapter (also after a cloudpickle round trip)."""
    return isinstance(fn, SkyRLPolicyLoss)


def _owner(fn: Callable) -> str:
    module = getattr(fn, "__module__", None) or "?"
    where = f"{module}.{getattr(fn, '__qualname__', repr(fn))}"
    return f"SkyRL's built-in {where}" if module.split(".")[0] == "skyrl" else where


def skyrl_policy_loss_registry() -> Any:
    """SkyRL's ``PolicyLossRegistry``; ImportError saying why when SkyRL cannot be imported."""
    try:
        from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
    except Exception as exc:  # noqa: BLE001 - SkyRL fails at import with non-ImportErrors (pydantic), turned into one
        hint = ""
        if sys.version_info < (3, 12):
            hint = (
                " skyrl 0.3 and 0.4 import only on Python >= 3.12: their pydantic models use typing.TypedDict, "
                "which pydantic rejects on older Pythons."
            )
        raise ImportError(f"gmpo_plugins: SkyRL cannot be imported ({type(exc).__name__}: {exc}).{hint}") from exc
    return PolicyLossRegistry


def register_losses(registry: Any = None, *, check_trainer: bool = True) -> list[SkyRLName]:
    """Register all registry losses into ``registry`` (default: SkyRL's PolicyLossRegistry)
    under the names of the module docstring; returns how each loss was named.

    ``check_trainer``: first check SkyRL's advantage pre-scaling (``prescaling``), raising
    UpstreamDriftError when it changed (the entry point checks it only for runs that select
    a registry loss, so it passes False).
    """
    if registry is None:
        registry = skyrl_policy_loss_registry()
    warn_if_untested("skyrl")
    if check_trainer:
        check_prescaling()

    taken = set(registry.list_available())
    names = []
    refused = list(refused_losses())
    for loss in [spec.name for spec in list_losses()] + refused:
        bare: str | None = loss
        taken_by = None
        for name in (PREFIX + loss, loss):
            if name not in taken:
                registry.register(name, SkyRLPolicyLoss(loss, name))
                continue
            current = registry.get(name)
            if is_ours(current):
                continue
            if name == loss:
                bare, taken_by = None, _owner(current)
            else:
                logger.warning(
                    "gmpo_plugins: SkyRL policy_loss_type %r is taken by %s; not replaced", name, _owner(current)
                )
        if loss not in refused:
            names.append(SkyRLName(loss, PREFIX + loss, bare, taken_by))
    return names
