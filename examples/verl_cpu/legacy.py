"""verl's deprecated legacy trainer (``trainer.use_v1=false``: ``RayPPOTrainer``) on the CPU.

verl 0.9.1 still ships the legacy trainer but deprecates it (``main_ppo`` warns; its default is
the v1 trainer, ``trainer.CPUTrainerSync`` here). ``CPUTaskRunner`` is verl's legacy
``TaskRunner`` whose actor/rollout role runs ``workers.GlooActorRolloutRefWorker``, passed with
``run_ppo(config, task_runner_class=CPUTaskRunner)``; ``launch`` uses it only when the caller
sets ``trainer.use_v1=false`` (deprecated, kept while verl ships the legacy path).
"""

from __future__ import annotations

from typing import Any

import ray
from verl.trainer.main_ppo_v0 import BaseTaskRunner, TaskRunner

from verl_cpu.workers import GlooActorRolloutRefWorker  # type: ignore[import-not-found]


class _CPUTaskRunner(BaseTaskRunner):
    """verl's legacy ``TaskRunner`` with the actor/rollout role mapped to ``GlooActorRolloutRefWorker``.

    ``run`` is verl's ``TaskRunner.run`` (the function itself: the Ray actor class cannot be
    subclassed directly).
    """

    run = TaskRunner.__ray_actor_class__.run

    def add_actor_rollout_worker(self, config: Any) -> tuple[type, type]:
        from verl.trainer.ppo.ray_trainer import Role

        _, worker_group_cls = super().add_actor_rollout_worker(config)
        for role in (Role.ActorRollout, Role.ActorRolloutRef):
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(GlooActorRolloutRefWorker)
        return GlooActorRolloutRefWorker, worker_group_cls


CPUTaskRunner = ray.remote(_CPUTaskRunner)
