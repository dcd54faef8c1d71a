r"""OpenRLHF integration: registry losses as ``--actor.policy_loss_type`` of OpenRLHF 0.11.x.

OpenRLHF has no plugin mechanism: ``PolicyLoss`` knows ppo and gspo, the CLI's argparse
rejects other names, and the actors run in Ray workers that import OpenRLHF themselves.

    gmpo-openrlhf <train_ppo_ray arguments> --actor.policy_loss_type gmpo \\
        --actor.eps_clip_low_high 0.4 0.4 --algo.advantage.estimator group_norm --algo.kl.use_loss

Own launch script instead of ``gmpo-openrlhf``::

    from gmpo_plugins.adapters.openrlhf import install, runtime_env
    install()                                         # this process
    ray.init(runtime_env=runtime_env({"env_vars": {...}}))   # every Ray worker

Modules: ``version`` (supported range, no import of OpenRLHF), ``options`` (PolicyLoss
arguments -> registry loss, hyper-parameters, BatchInfo; refusals), ``patch`` (the
in-place patch of PolicyLoss), ``hook`` (post-import hook, Ray worker setup hook, runtime
env), ``cli`` (the console script). Importing this package imports neither OpenRLHF, Ray
nor deepspeed.
"""

from __future__ import annotations

from gmpo_plugins.adapters.openrlhf.hook import HOOK, install, runtime_env, setup_worker
from gmpo_plugins.adapters.openrlhf.options import OpenRLHFConfigError, policy_loss_choices
from gmpo_plugins.adapters.openrlhf.version import SUPPORTED, UnsupportedOpenRLHFVersionError, check_version

__all__ = [
    "HOOK",
    "SUPPORTED",
    "OpenRLHFConfigError",
    "UnsupportedOpenRLHFVersionError",
    "check_version",
    "install",
    "policy_loss_choices",
    "runtime_env",
    "setup_worker",
]
