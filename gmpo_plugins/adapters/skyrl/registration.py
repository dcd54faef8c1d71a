"""Register every registry loss into SkyRL's ``PolicyLossRegistry`` without shadowing.

Names (``trainer.algorithm.policy_loss_type`` values), for each registry loss ``<name>``:

    gmpo_plugins.<name>   always (unambiguous)
    <name>                as well, unless SkyRL's registry already holds that name for
                          something that is not ours: a SkyRL built-in (``gspo``,
                          ``regular``, ...) or another user's loss

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
from gmpo_plugins.core.registry import list_losses

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
                " skyrl 0.3 imports only on Python >= 3.12: its pydantic models use typing.TypedDict, which "
                "pydantic rejects on older Pythons."
            )
        raise ImportError(f"gmpo_plugins: SkyRL cannot be imported ({type(exc).__name__}: {exc}).{hint}") from exc
    return PolicyLossRegistry


def register_losses(registry: Any = None) -> list[SkyRLName]:
    """Register all registry losses into ``registry`` (default: SkyRL's PolicyLossRegistry)
    under the names of the module docstring; returns how each loss was named."""
    if registry is None:
        registry = skyrl_policy_loss_registry()

    taken = set(registry.list_available())
    names = []
    for spec in list_losses():
        bare: str | None = spec.name
        taken_by = None
        for name in (PREFIX + spec.name, spec.name):
            if name not in taken:
                registry.register(name, SkyRLPolicyLoss(spec.name, name))
                continue
            current = registry.get(name)
            if is_ours(current):
                continue
            if name == spec.name:
                bare, taken_by = None, _owner(current)
            else:
                logger.warning(
                    "gmpo_plugins: SkyRL policy_loss_type %r is taken by %s; not replaced", name, _owner(current)
                )
        names.append(SkyRLName(spec.name, PREFIX + spec.name, bare, taken_by))
    return names
