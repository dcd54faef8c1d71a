"""The ``verl.plugins`` entry point: imports the verl adapter, and fails loudly if it cannot.

verl imports every ``verl.plugins`` entry point at ``import verl`` (in the driver and in
every Ray worker) and logs one that raises only at DEBUG, so a broken install of this
package would surface as "Unsupported loss mode: gmpo", or in one worker only. This module
is that entry point (``gmpo_plugins = gmpo_plugins.adapters.verl_plugin``). It imports
``gmpo_plugins.adapters.verl``, which registers the losses; when that raises, it

    1. logs the error at ERROR level with its traceback,
    2. registers in verl's ``POLICY_LOSS_REGISTRY``, under every name the adapter would have
       registered that is still free (``names.BUILTIN_LOSS_NAMES``, bare and prefixed),
       a stand-in that raises ``PluginLoadError`` when verl calls it: the message names the
       package, this entry point and the original exception,
    3. re-raises (verl then logs it at DEBUG and goes on).

Either way it first installs the policy-loss check in verl's driver-side ``validate_config``
(``verl_driver_check``), so that in the driver an unknown ``loss_mode``, a registry loss whose
settings cannot be honoured, or a loss of this package that failed to load stops the launch
before Ray, the workers and the models start.

So asking for one of the losses in a process where the package failed to register fails
at the loss's first call with the reason, never with an unknown-name error or a fallback.
A later successful import of the adapter (``external_lib``) replaces the stand-ins (marked
by ``load_failure.STAND_IN``). A loss name that two distributions claim is no load failure: the
registry refuses that name only and the adapter registers everything else.
"""

from __future__ import annotations

import logging

from gmpo_plugins.adapters import verl_driver_check
from gmpo_plugins.adapters.load_failure import STAND_IN, PluginLoadError, load_failure_message, stand_in
from gmpo_plugins.adapters.names import BUILTIN_LOSS_NAMES, PREFIX

logger = logging.getLogger(__name__)

ENTRY_POINT = "verl.plugins: gmpo_plugins = gmpo_plugins.adapters.verl_plugin"
ADAPTER = "gmpo_plugins.adapters.verl"
HOW = f"loaded by verl's entry point '{ENTRY_POINT}', whose failures verl logs only at DEBUG"

FAILURE: BaseException | None = None
"""The exception that stopped the adapter's import in this process, or None."""


def register_stand_ins(error: BaseException) -> list[str]:
    """Register the stand-ins for ``error`` under every free name; returns those names."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    registered = []
    for loss in BUILTIN_LOSS_NAMES:
        for name in (loss, PREFIX + loss):
            current = POLICY_LOSS_REGISTRY.get(name)
            if current is None or hasattr(current, STAND_IN):
                message = load_failure_message(f"verl loss_mode {name!r}", HOW, error)
                POLICY_LOSS_REGISTRY[name] = stand_in(name, PluginLoadError(message), error)
                registered.append(name)
    return registered


def load() -> None:
    """Install the driver check, import the adapter; on failure, steps 1-3 of the module docstring."""
    global FAILURE
    verl_driver_check.install(lambda: FAILURE)
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
