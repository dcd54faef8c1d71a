"""The error a framework gets when it asks for a loss of this package in a process where the
package failed to load (a broken install, an adapter that raised at import).

Importable without torch or the core, so that verl's entry point (``verl_plugin``) can build
it when the adapter itself cannot be imported. The message names the framework's setting,
the package, how the loss reached the process and the original exception; never the
framework's unknown-name error or another loss.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gmpo_plugins.adapters.names import PACKAGE

STAND_IN = "__gmpo_plugins_unavailable__"
"""The attribute (the error's message) that marks a ``stand_in``; registrations replace such entries."""


class PluginLoadError(RuntimeError):
    """A loss of this package was asked for in a process where the package failed to load."""


def load_failure_message(setting: str, how: str, error: BaseException) -> str:
    """``PluginLoadError``'s message.

    Args:
        setting: the framework's setting that asked for the loss, e.g. "SkyRL policy_loss_type 'gmpo'".
        how: how the package reached this process (its entry point, patch or registration).
        error: the exception that stopped the package from loading.
    """
    return (
        f"gmpo_plugins: {setting} comes from the package {PACKAGE} ({how}), which failed to load in this "
        f"process (pid {os.getpid()}): {type(error).__name__}: {error}. Fix it in this process's environment "
        f"(a broken install: `pip install --force-reinstall {PACKAGE}`), then check with `gmpo-plugins doctor`"
    )


def stand_in(name: str, error: Exception, cause: BaseException | None = None) -> Callable[..., Any]:
    """A framework policy loss registered as ``name`` that raises ``error`` (from ``cause``)
    whenever it is called, marked with ``STAND_IN``."""

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise error from cause

    unavailable.__name__ = unavailable.__qualname__ = f"unavailable_{name.replace('.', '_')}"
    setattr(unavailable, STAND_IN, str(error))
    return unavailable
