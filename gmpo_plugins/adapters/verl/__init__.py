r"""verl integration: every registry loss as a verl ``policy_loss.loss_mode``.

Importing this package registers the losses into verl's ``POLICY_LOSS_REGISTRY``
(``registration``). verl imports it in every process that imports verl, through the
entry point ``[project.entry-points."verl.plugins"] gmpo_plugins =
"gmpo_plugins.adapters.verl_plugin"`` (which imports this package, and makes a failure to
do so loud); verl only imports entry points (it never calls them), so registration is a
side effect of the import. Users who disable plugin autoloading
(``VERL_USE_EXTERNAL_PLUGINS=none``) load it with
``actor_rollout_ref.model.external_lib=gmpo_plugins.adapters.verl`` or
``VERL_USE_EXTERNAL_MODULES=gmpo_plugins.adapters.verl``; repeated imports are harmless. verl
0.8 imports no entry points: there ``VERL_USE_EXTERNAL_MODULES`` (naming
``gmpo_plugins.adapters.verl_plugin`` for the driver-side check too) or ``external_lib`` is needed
(``gmpo_plugins.adapters.verl_releases``).

    python -m verl.trainer.main_ppo ... actor_rollout_ref.actor.policy_loss.loss_mode=gmpo \\
        actor_rollout_ref.actor.clip_ratio_low=0.4 actor_rollout_ref.actor.clip_ratio_high=0.4 \\
        actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean

Modules: ``options`` (config fields -> hyper-parameters and BatchInfo, refusals),
``checks`` (``check_policy_loss``: the same refusals on a composed config, before training,
and the ``algorithm.rollout_correction`` settings verl would not apply to a registry loss;
run in verl's driver-side ``validate_config`` by ``gmpo_plugins.adapters.verl_driver_check``),
``metrics`` (metric names), ``policy_loss`` (the function verl calls), ``registration``
(names, no shadowing). ``python -m gmpo_plugins.adapters.verl`` prints the name table.
"""

from __future__ import annotations

import logging

from gmpo_plugins.adapters.verl.checks import check_policy_loss
from gmpo_plugins.adapters.verl.options import VerlConfigError
from gmpo_plugins.adapters.verl.registration import PREFIX, VerlName, is_ours, register_losses

__all__ = ["PREFIX", "VERL_NAMES", "VerlConfigError", "VerlName", "check_policy_loss", "is_ours", "register_losses"]

logger = logging.getLogger(__name__)


def _register() -> list[VerlName]:
    """register_losses(), logging a failure (ERROR, with traceback) before re-raising: verl
    logs a failing entry point only at DEBUG, leaving just "Unsupported loss mode: gmpo"."""
    try:
        return register_losses()
    except Exception:
        logger.exception("gmpo_plugins: registering the gmpo-plugins losses into verl failed")
        raise


VERL_NAMES: list[VerlName] = _register()
