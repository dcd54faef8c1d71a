"""verl's engine workers on a gloo process group (stand-in for the NCCL group verl builds).

verl's ``TrainingWorker.__init__`` joins the process group with the backend string
``f"cpu:gloo,{device}:{backend}"``, which on the CPU platform reads ``"cpu:gloo,cpu:gloo"`` and
torch refuses ("Duplicate device type cpu"). ``GlooTrainingWorker`` joins a plain gloo group
first (same ``RANK`` / ``WORLD_SIZE`` / ``DIST_INIT_METHOD`` verl's Ray workers export); verl
then finds the group initialised and keeps it.

Installed through verl's extension points, with verl's code otherwise unchanged:
``ActorRolloutRefWorker.actor_worker_cls`` / ``ref_worker_cls`` (class attributes meant for
subclassing) on ``GlooActorRolloutRefWorker``, which the v1 trainer ``trainer.CPUTrainerSync``
(and the deprecated legacy task runner of ``legacy``) puts on verl's actor/rollout role.

With ``GMPO_CPU_STEP_PARAMS`` set (``examples/optimiser_steps.py``), ``GlooTrainingWorker`` also
saves the actor's parameters after each optimiser step of RL step 1: verl syncs its rollout
server once per RL step, after the step's last optimiser step, so the steps before it (several
mini-batches or epochs on one rollout batch) are seen nowhere else. The hook is torch's own
``Optimizer.register_step_post_hook`` on the engine's optimizer (built by ``reset``, which calls
the engine's ``initialize``; the reference model has none), and the parameters are taken the way
verl's weight sync takes them, from the engine's ``get_per_tensor_param`` (full tensors gathered
from the FSDP shards, Hugging Face names), on every rank, written by rank 0.
"""

from __future__ import annotations

import os
from typing import Any

import optimiser_steps
import torch.distributed
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
        self._optimiser_steps = 0
        self._step_hook: Any = None

    def reset(self) -> None:
        """verl's ``reset`` (the engine's ``initialize``: model and optimiser), then the post-step
        hook of ``save_step_params`` on the optimiser it built, once (module docstring)."""
        super().reset()
        optimizer = getattr(self.engine, "optimizer", None)
        if os.environ.get(optimiser_steps.DIR_ENV) and optimizer is not None and self._step_hook is None:
            self._step_hook = optimizer.register_step_post_hook(self.save_step_params)

    def save_step_params(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """After optimiser step n of the run: the parameters through ``optimiser_steps.save``."""
        self._optimiser_steps += 1
        if optimiser_steps.wanted(self._optimiser_steps):
            params, _ = self.engine.get_per_tensor_param()
            optimiser_steps.save(params, self._optimiser_steps, write=torch.distributed.get_rank() == 0)


class GlooActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's ``ActorRolloutRefWorker`` whose actor and reference models train on gloo."""

    actor_worker_cls = GlooTrainingWorker
    ref_worker_cls = GlooTrainingWorker
