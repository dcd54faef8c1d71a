"""verl's synchronous v1 trainer with the actor, rollout and reference roles on gloo workers
(stand-in for the NCCL workers ``PPOTrainerSync`` starts).

verl's default trainer (``trainer.use_v1=true``: ``main_ppo``'s ``TaskRunnerV1``) picks its
trainer class by ``trainer.v1.trainer_mode`` from the registry of
``verl.trainer.ppo.v1.register_trainer``. ``CPUTrainerSync`` is verl's ``PPOTrainerSync``
registered as ``trainer.v1.trainer_mode=cpu_sync``; its ``_init_resource_pool_mgr`` is verl's,
then maps the actor/rollout(/reference) role to ``workers.GlooActorRolloutRefWorker`` (verl's
worker on a gloo process group, which the CPU needs: ``workers``). Everything else (TransferQueue,
rollout, reward, advantages, log-probs, the actor update, weight sync) is verl's.
"""

from __future__ import annotations

import ray
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1 import PPOTrainerSync
from verl.trainer.ppo.v1.trainer_base import register_trainer

from verl_cpu.workers import GlooActorRolloutRefWorker  # type: ignore[import-not-found]

MODE = "cpu_sync"
ACTOR_ROLES = (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef, Role.RefPolicy)


@register_trainer(MODE)
class CPUTrainerSync(PPOTrainerSync):
    """verl's ``PPOTrainerSync`` whose actor-side roles run ``GlooActorRolloutRefWorker``."""

    def _init_resource_pool_mgr(self) -> None:
        super()._init_resource_pool_mgr()
        for role in ACTOR_ROLES:
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(GlooActorRolloutRefWorker)
