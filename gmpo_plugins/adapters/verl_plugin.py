"""The ``verl.plugins`` entry point: imports the verl adapter, and fails loudly if it cannot.

verl imports every ``verl.plugins`` entry point at ``import verl`` (in the driver and in
every Ray worker) and logs one that raises only at DEBUG, so a broken install of this
package would surface as "Unsupported loss mode: gmpo", or in one worker only. This module
is that entry point (``gmpo_plugins = gmpo_plugins.adapters.verl_plugin``). It imports
``gmpo_plugins.adapters.verl``, which registers the losses; when that raises, it

    1. logs the error at ERROR level with its traceback,
    2. registers in verl's ``POLICY_LOSS_REGISTRY``, under every name the adapter would have
       registered that is still free (``LOSS_NAMES``, bare and ``gmpo_plugins.``-prefixed),
       a stand-in that raises ``PluginLoadError`` when verl calls it: the message names the
       package, this entry point and the original exception,
    3. re-raises (verl then logs it at DEBUG and goes on).

So asking for one of the losses in a process where the package failed to register fails
at the loss's first call with the reason, never with an unknown-name error or a fallback.
A later successful import of the adapter (``external_lib``) replaces the stand-ins (marked
by ``STAND_IN``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

PACKAGE = "gmpo-plugins"
ENTRY_POINT = "verl.plugins: gmpo_plugins = gmpo_plugins.adapters.verl_plugin"
ADAPTER = "gmpo_plugins.adapters.verl"
PREFIX = "gmpo_plugins."
STAND_IN = "__gmpo_plugins_unavailable__"
"""The attribute (the message) that marks a stand-in; ``registration`` replaces such entries."""
LOSS_NAMES = ("gmpo", "gmpo_noclip", "gmpo_seqclip", "gmpo_nonorm", "grpo", "dapo", "dr_grpo", "gspo")
"""The built-in losses' names (``tests/verl`` checks them against the registry)."""

FAILURE: BaseException | None = None
"""The exception that stopped the adapter's import in this process, or None."""


class PluginLoadError(RuntimeError):
    """A loss of this package was asked for in a process where the package failed to load."""


def failure_message(loss_mode: str, error: BaseException) -> str:
    """The message of the stand-in registered for ``loss_mode``."""
    return (
        f"gmpo_plugins: verl loss_mode {loss_mode!r} comes from the package {PACKAGE}, whose entry point "
        f"'{ENTRY_POINT}' failed to load in this process (pid {os.getpid()}): {type(error).__name__}: {error}. "
        "verl logs a failing plugin only at DEBUG; fix the error above (a conflicting gmpo_plugins plugin, a "
        f"broken install: `pip install --force-reinstall {PACKAGE}`), then check with `gmpo-plugins doctor`"
    )


def _stand_in(loss_mode: str, error: BaseException) -> Callable[..., Any]:
    message = failure_message(loss_mode, error)

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise PluginLoadError(message) from error

    unavailable.__name__ = unavailable.__qualname__ = f"unavailable_{loss_mode.replace('.', '_')}"
    setattr(unavailable, STAND_IN, message)
    return unavailable


def register_stand_ins(error: BaseException) -> list[str]:
    """Register the stand-ins for ``error`` under every free name; returns those names."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    registered = []
    for loss in LOSS_NAMES:
        for name in (loss, PREFIX + loss):
            current = POLICY_LOSS_REGISTRY.get(name)
            if current is None or hasattr(current, STAND_IN):
                POLICY_LOSS_REGISTRY[name] = _stand_in(name, error)
                registered.append(name)
    return registered


def load() -> None:
    """Import the adapter; on failure, steps 1-3 of the module docstring."""
    global FAILURE
    try:
        __import__(ADAPTER)
    except Exception as error:
        FAILURE = error
        logger.exception("gmpo_plugins: %s failed to load; its verl losses will raise when used", ENTRY_POINT)
        try:
            register_stand_ins(error)
        except Exception:  # verl itself is broken: nothing to register into; the log says why
            logger.exception("gmpo_plugins: could not register the stand-ins in verl")
        raise


load()
