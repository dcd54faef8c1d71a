"""CPU stand-in (example, not shipped) for
`vllm.distributed.device_communicators.pynccl.PyNcclCommunicator`: vLLM's NCCL communicator needs CUDA; this
one is a gloo process group on the same store, so OpenRLHF's default ``--vllm.sync_backend nccl`` weight
broadcast runs on CPU (``broadcast(tensor, src, stream)``)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class PyNcclCommunicator:
    def __init__(self, group: Any, device: Any = None) -> None:
        self.rank = group.rank
        self.world_size = group.world_size
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("weight-sync", group.store), group.rank, group.world_size)

    def broadcast(self, tensor: torch.Tensor, src: int, stream: Any = None) -> None:
        self._gloo.broadcast(tensor, src).wait()
