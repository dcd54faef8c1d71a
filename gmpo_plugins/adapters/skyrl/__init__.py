r"""SkyRL integration: every registry loss as a SkyRL ``trainer.algorithm.policy_loss_type``.

SkyRL loads no plugins through entry points; its extension point is ``PolicyLossRegistry``,
which it ships to every Ray worker through a named registry actor. So a run registers the
losses in its driver process before SkyRL starts Ray, either with SkyRL's own entry point
wrapped (``entrypoint``)

    python -m gmpo_plugins.adapters.skyrl trainer.algorithm.policy_loss_type=gmpo \\
        trainer.algorithm.loss_reduction=sequence_mean \\
        trainer.algorithm.eps_clip_low=0.4 trainer.algorithm.eps_clip_high=0.4 ...

or with one line in the user's own entry script, before ``initialize_ray``:

    from gmpo_plugins.adapters.skyrl import register_losses; register_losses()

Importing this package registers nothing (SkyRL unpickles our losses in its workers, which
imports it). Modules: ``options`` (config fields -> hyper-parameters, advantages and
BatchInfo, refusals), ``off_policy`` (TIS -> IS weights), ``metrics`` (metric names),
``policy_loss`` (the callable SkyRL calls), ``registration`` (names, no shadowing),
``entrypoint`` (SkyRL's main with the losses registered).
"""

from gmpo_plugins.adapters.skyrl.options import SkyRLConfigError
from gmpo_plugins.adapters.skyrl.policy_loss import SkyRLPolicyLoss
from gmpo_plugins.adapters.skyrl.registration import PREFIX, SkyRLName, is_ours, register_losses

__all__ = ["PREFIX", "SkyRLConfigError", "SkyRLName", "SkyRLPolicyLoss", "is_ours", "register_losses"]
