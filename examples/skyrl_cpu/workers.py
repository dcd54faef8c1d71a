"""SkyRL's FSDP policy worker on CPU: gloo instead of NCCL, a CPU device mesh, no CUDA calls.

SkyRL has no device or platform layer: ``workers/worker.py`` initialises the process group with
``backend="cpu:gloo,cuda:nccl"`` (this torch has no NCCL) and a ``"cuda"`` device mesh,
``distributed/fsdp_utils.py::create_device_mesh`` builds another ``"cuda"`` mesh (FSDP2 would
place the shards on CUDA), ``distributed/fsdp_strategy.py`` calls ``torch.cuda.set_device`` and
``torch.cuda.synchronize``, and the worker moves batches to ``torch.cuda.current_device()``.

Its extension point for the worker is the class the trainer builds
(``RayPPOTrainer.build_models(PolicyWorker, CriticWorker, RefWorker)``), so ``CPUPolicyWorker``
subclasses SkyRL's ``FSDPPolicyWorkerBase`` and, in its own Ray process only:

- ``init_worker_process_group``: gloo and a ``"cpu"`` mesh, otherwise SkyRL's code;
- ``torch.cuda.set_device`` / ``synchronize`` become no-ops and ``current_device`` answers
  ``"cpu"`` (so ``.to(current_device())`` keeps tensors on the CPU), and
  ``fsdp_utils.init_device_mesh`` builds ``"cpu"`` meshes, and
  ``fsdp_utils._sync_non_persistent_buffers`` (which broadcasts rotary ``inv_freq`` buffers
  through ``.cuda()`` tensors) broadcasts CPU tensors: patches, because SkyRL calls these
  functions directly;
- with ``SKYRL_CPU_OPTIMIZER=sgd`` in the environment, the AdamW that SkyRL's strategy builds
  is replaced by plain SGD with the same learning rate (and a constant schedule), so that one
  step moves the parameters by ``-lr * gradient``: tests compare parameters after a step, and
  Adam's first step ``lr * g / |g|`` would hide a wrongly scaled gradient;
- with ``GMPO_CPU_STEP_PARAMS`` in the environment (``examples/optimiser_steps.py``), the
  parameters after each optimiser step of RL step 1: SkyRL syncs its inference engine once per
  RL step, after the step's last optimiser step, so the steps before it are seen nowhere else.
  The hook is torch's own ``Optimizer.register_step_post_hook`` on the optimiser the worker
  steps (SkyRL's, or the SGD above), and the parameters are taken the way SkyRL's weight sync
  takes them (full tensors gathered from the FSDP2 shards, Hugging Face names; skyrl 0.3.0:
  the worker's ``weight_extractor``, 0.4.0: its ``_build_weight_source``, an
  ``FsdpWeightSource``) in float32, on every rank, written by rank 0.

The loss, micro-batching, advantage pre-scaling, FSDP2 sharding, gradient all-reduce, clipping
and the weight sync are SkyRL's.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import optimiser_steps
import ray
import torch

OPTIMIZER_ENV = "SKYRL_CPU_OPTIMIZER"


def _cpu_mesh_builder(init_device_mesh):
    def init_cpu_device_mesh(device_type: str, *args: Any, **kwargs: Any):
        return init_device_mesh("cpu", *args, **kwargs)

    return init_cpu_device_mesh


def _sync_non_persistent_buffers_cpu(model: torch.nn.Module, loaded_sd: dict) -> None:
    """``fsdp_utils._sync_non_persistent_buffers`` with CPU tensors: rank 0's non-persistent
    buffers (excluded from the state dict) broadcast to every rank."""
    for module in model.modules():
        for key in sorted(getattr(module, "_non_persistent_buffers_set", set())):
            buf = module._buffers.get(key)
            if buf is None:
                continue
            if torch.distributed.get_rank() == 0:
                src = buf.detach().to("cpu").clone()
            else:
                src = torch.empty(buf.shape, dtype=buf.dtype, device="cpu")
            torch.distributed.broadcast(src, src=0)
            module._buffers[key] = src


def install_cpu_standins() -> None:
    """Point SkyRL's direct CUDA calls at the CPU in this process (module docstring)."""
    from skyrl.backends.skyrl_train.distributed import fsdp_utils

    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.current_device = lambda: "cpu"
    if not getattr(fsdp_utils.init_device_mesh, "cpu_standin", False):
        fsdp_utils.init_device_mesh = _cpu_mesh_builder(fsdp_utils.init_device_mesh)
        fsdp_utils.init_device_mesh.cpu_standin = True
    fsdp_utils._sync_non_persistent_buffers = _sync_non_persistent_buffers_cpu


def _worker_classes():
    from skyrl.backends.skyrl_train.workers.fsdp.fsdp_worker import FSDPPolicyWorkerBase, FSDPRefWorkerBase

    class CPUWorkerMixin:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            install_cpu_standins()
            torch.set_num_threads(1)
            super().__init__(*args, **kwargs)

        def init_worker_process_group(self) -> None:
            from skyrl.backends.skyrl_train.workers.worker import MeshRank

            if not torch.distributed.is_initialized():
                torch.distributed.init_process_group(backend="gloo", timeout=timedelta(seconds=300))
            dp_size = self._world_size // self.sequence_parallel_size
            self.device_mesh = torch.distributed.device_mesh.init_device_mesh(
                "cpu", mesh_shape=(dp_size, self.sequence_parallel_size), mesh_dim_names=("dp", "sp")
            )
            self.mesh_rank = MeshRank(
                dp=self.device_mesh.get_local_rank(mesh_dim="dp"),
                sp=self.device_mesh.get_local_rank(mesh_dim="sp"),
                tp=0,
                pp=0,
                world_size=self._world_size,
                dp_size=self.device_mesh.size(0),
                pp_size=1,
            )

    class CPUPolicyWorker(CPUWorkerMixin, FSDPPolicyWorkerBase):
        """SkyRL's FSDP policy worker on gloo and the CPU (module docstring)."""

        def init_model(self, model_path: str, num_training_steps: int | None = None) -> None:
            super().init_model(model_path, num_training_steps)
            if os.environ.get(OPTIMIZER_ENV, "") == "sgd":
                params = [p for group in self.optimizer.param_groups for p in group["params"]]
                lr = self.cfg.policy.optimizer_config.lr
                self.optimizer = torch.optim.SGD(params, lr=lr)
                self.scheduler = torch.optim.lr_scheduler.ConstantLR(self.optimizer, factor=1.0, total_iters=0)
            self._optimiser_steps = 0
            if os.environ.get(optimiser_steps.DIR_ENV):
                self.optimizer.register_step_post_hook(self.save_step_params)

        def save_step_params(self, optimizer: Any, args: Any, kwargs: Any) -> None:
            """After optimiser step n of the run: the parameters through ``optimiser_steps.save``."""
            self._optimiser_steps += 1
            if optimiser_steps.wanted(self._optimiser_steps):
                optimiser_steps.save(
                    self.named_full_params(), self._optimiser_steps, write=torch.distributed.get_rank() == 0
                )

        def named_full_params(self) -> Any:
            """``(name, full float32 tensor)`` as SkyRL's weight sync takes them (module docstring)."""
            if hasattr(self, "weight_extractor"):  # skyrl 0.3.0
                return (
                    (name, tensor)
                    for chunk in self.weight_extractor.extract_weights(torch.float32)
                    for name, tensor in zip(chunk.names, chunk.tensors, strict=True)
                )
            return iter(self._build_weight_source(torch.float32, "nccl"))  # skyrl 0.4.0

    class CPURefWorker(CPUWorkerMixin, FSDPRefWorkerBase):
        """SkyRL's FSDP reference worker on gloo and the CPU (module docstring)."""

    return CPUPolicyWorker, CPURefWorker


def ray_worker_classes() -> tuple[Any, Any]:
    """``(PolicyWorker, RefWorker)`` Ray actor classes, asking for one (logical) GPU each as
    SkyRL's own do (``fsdp_worker.py``)."""
    policy, ref = _worker_classes()
    return ray.remote(num_gpus=1)(policy), ray.remote(num_gpus=1)(ref)
