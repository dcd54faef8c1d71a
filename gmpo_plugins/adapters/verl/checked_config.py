r"""verl's FSDP actor config that checks the policy loss when verl builds it (in the driver,
before Ray, the workers and the models start).

verl 0.9.1 loads plugins in the driver too, but none of its plugin hooks sees the composed
config; the first driver step that does is ``validate_config`` (``main_ppo.main``, before
``run_ppo``), which builds the actor dataclass from ``actor_rollout_ref.actor._target_``
(Hydra's instantiate). Pointing that ``_target_`` at ``CheckedFSDPActorConfig`` (verl's
``FSDPActorConfig``, unchanged but for ``__post_init__``) runs ``check_policy_loss`` there:

    python -m verl.trainer.main_ppo ... \
        actor_rollout_ref.actor._target_=gmpo_plugins.adapters.verl.checked_config.CheckedFSDPActorConfig

A ``loss_mode`` verl does not know (a typo, a plugin that failed to import: verl's message
with the available names) or whose actor fields a registry loss cannot honour then exits the
driver with ``VerlConfigError`` naming the setting. verl's workers build the same class; the
check repeats there harmlessly. Without the override the same errors surface at the first
actor update.
"""

from __future__ import annotations

from verl.workers.config import FSDPActorConfig

from gmpo_plugins.adapters.verl.checks import check_policy_loss


class CheckedFSDPActorConfig(FSDPActorConfig):
    """verl's ``FSDPActorConfig`` whose construction runs ``check_policy_loss`` on itself."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_policy_loss(self)
