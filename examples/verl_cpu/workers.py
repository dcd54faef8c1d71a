"""verl's engine workers on a gloo process group (stand-in for the NCCL group verl builds).

verl's ``TrainingWorker.__init__`` joins the process group with the backend string
``f"cpu:gloo,{device}:{backend}"``, which on the CPU platform reads ``"cpu:gloo,cpu:gloo"`` and
torch refuses ("Duplicate device type cpu"). ``GlooTrainingWorker`` joins a plain gloo group
first (same ``RANK`` / ``WORLD_SIZE`` / ``DIST_INIT_METHOD`` verl's Ray workers export); verl
then finds the group initialised and keeps it.

Installed through verl's extension points, with verl's code otherwise unchanged:
``ActorRolloutRefWorker.actor_worker_cls`` / ``ref_worker_cls`` (class attributes meant for
subclassing) on ``GlooActorRolloutRefWorker``, and ``run_ppo(config, task_runner_class=...)``
with ``CPUTaskRunner``, whose ``add_actor_rollout_worker`` maps verl's actor/rollout role to
that worker (the rest is verl's ``TaskRunner``).
"""

from __future__ import annotations

import os
from typing import Any

import ray
import torch.distributed
from verl.trainer.main_ppo_v0 import BaseTaskRunner, TaskRunner
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker


def init_gloo_process_group() -> None:
    """Join the worker group's process group with the gloo backend (idempotent)."""
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(
            backend="gloo",
            rank=int(os.environ.get("RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            init_method=os.environ.get("DIST_INIT_METHOD"),
        )


class GlooTrainingWorker(TrainingWorker):
    """verl's ``TrainingWorker`` on a gloo process group."""

    def __init__(self, config: Any) -> None:
        init_gloo_process_group()
        super().__init__(config)


class GlooActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's ``ActorRolloutRefWorker`` whose actor and reference models train on gloo."""

    actor_worker_cls = GlooTrainingWorker
    ref_worker_cls = GlooTrainingWorker


class _CPUTaskRunner(BaseTaskRunner):
    """verl's ``TaskRunner`` with the actor/rollout role mapped to ``GlooActorRolloutRefWorker``.

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
