"""The policy-loss check inside verl's own driver-side validation, so that a loss that would fail
stops ``python -m verl.trainer.main_ppo ...`` before Ray, the workers and the models start.

verl imports the ``verl.plugins`` entry point (``verl_plugin``) at ``import verl``, in the driver
too, but hands plugins no config. The first driver step that sees the composed config is
``verl.utils.config.validate_config(config, use_reference_policy, use_critic)``, which
``main_ppo.main`` (and the legacy ``main_ppo_v0``) call before ``run_ppo``; they bind it by name
when they are imported, after ``import verl`` has loaded the plugin. ``install`` replaces that
module attribute by a wrapper that first runs

    adapter loaded        check_policy_loss(actor dataclass, config.algorithm.rollout_correction)
                          (``gmpo_plugins.adapters.verl.checks``: an unknown ``loss_mode`` with
                          verl's list of names, a registry loss whose actor fields or rollout
                          correction it cannot honour)
    adapter failed        the requested ``loss_mode`` is one of the stand-ins the entry point
                          registered: PluginLoadError with the original exception

then verl's validation, unchanged. So the error verl would raise at the first actor update is
raised in the driver, named before any other setting verl would refuse, and nothing else
changes: a ``loss_mode`` that resolves and translates passes, verl's own losses included.
Without plugin autoloading (``VERL_USE_EXTERNAL_PLUGINS=none``) nothing is installed and the
same errors surface at the first update.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gmpo_plugins.adapters.load_failure import STAND_IN, PluginLoadError

CHECKED = "__gmpo_plugins_checks_the_policy_loss__"


def check_driver_config(config: Any, adapter_failure: BaseException | None) -> None:
    """Check the composed verl ``config`` (a DictConfig) as the module docstring says.

    Args:
        config: verl's composed config, as ``validate_config`` receives it.
        adapter_failure: the exception that stopped the adapter's import in this process, or None.
    """
    actor = config.actor_rollout_ref.actor
    if adapter_failure is None:
        from verl.utils.config import omega_conf_to_dataclass

        from gmpo_plugins.adapters.verl.checks import check_policy_loss

        check_policy_loss(omega_conf_to_dataclass(actor), config.algorithm.get("rollout_correction"))
        return
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    refusal = getattr(POLICY_LOSS_REGISTRY.get(actor.policy_loss.get("loss_mode", "vanilla")), STAND_IN, None)
    if refusal is not None:
        raise PluginLoadError(refusal) from adapter_failure


def checking(validate_config: Callable[..., Any], failure: Callable[[], BaseException | None]) -> Callable[..., Any]:
    """``check_driver_config`` followed by verl's ``validate_config``; ``failure`` gives the
    adapter's import error at call time (the entry point records it after installing this)."""

    @functools.wraps(validate_config)
    def validate_policy_loss_and_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        check_driver_config(config, failure())
        return validate_config(config, *args, **kwargs)

    setattr(validate_policy_loss_and_config, CHECKED, True)
    return validate_policy_loss_and_config


def install(failure: Callable[[], BaseException | None]) -> None:
    """Wrap ``verl.utils.config.validate_config`` by ``checking``; idempotent."""
    import verl.utils.config as verl_config

    if not getattr(verl_config.validate_config, CHECKED, False):
        verl_config.validate_config = checking(verl_config.validate_config, failure)
