"""Real data parallelism: two processes on the gloo backend, each with its shard and
dp_size=2, gradients all-reduced and averaged as DDP/FSDP do, equal the single-process
whole-batch gradient."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gmpo_plugins import BatchInfo, LossInputs, get_loss

from .batches import random_batch

WORLD = 2
NAMES = ["gmpo", "grpo", "dapo", "gspo"]


def _inputs() -> LossInputs:
    return random_batch(10, 8, seed=33, spread=0.6, empty_rows=(3,))


def _info(inputs: LossInputs) -> BatchInfo:
    return BatchInfo(
        dp_size=WORLD, global_batch_size=int(inputs.mask.any(-1).sum()), global_num_tokens=int(inputs.mask.sum())
    )


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        inputs = _inputs()
        info = _info(inputs)
        rows = slice(rank * 5, (rank + 1) * 5)
        # the rank's parameters are its shard of log-probs, as a model's parameters would be
        local = inputs.log_probs.detach()[rows].clone().requires_grad_()
        shard = LossInputs(local, inputs.old_log_probs[rows], inputs.advantages[rows], inputs.mask[rows])
        grads = []
        for name in NAMES:
            (grad,) = torch.autograd.grad(get_loss(name)(shard, info).loss, local)
            full = torch.zeros_like(inputs.log_probs)
            full[rows] = grad
            dist.all_reduce(full)  # DDP: sum over ranks ...
            grads.append(full / WORLD)  # ... then divide by the world size
        if rank == 0:
            torch.save(grads, os.path.join(out_dir, "grads.pt"))
        dist.barrier()  # both ranks are done with gloo before either tears it down
    finally:
        dist.destroy_process_group()


def test_gloo_two_ranks_equal_single_process(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    distributed = torch.load(tmp_path / "grads.pt")
    inputs = _inputs()
    info = BatchInfo(global_batch_size=int(inputs.mask.any(-1).sum()), global_num_tokens=int(inputs.mask.sum()))
    for name, grad in zip(NAMES, distributed, strict=True):
        (whole,) = torch.autograd.grad(get_loss(name)(inputs, info).loss, inputs.log_probs)
        assert whole.abs().sum() > 0
        torch.testing.assert_close(grad, whole, rtol=1e-6, atol=1e-12, msg=name)
