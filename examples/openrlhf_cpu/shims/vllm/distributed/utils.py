"""CPU stand-in (example, not shipped) for `vllm.distributed.utils.StatelessProcessGroup`: the TCP store that OpenRLHF's
weight sync group (actor rank 0 + the engines) rendezvous on, outside torch.distributed's default group."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist


@dataclass
class StatelessProcessGroup:
    rank: int
    world_size: int
    store: dist.Store

    @staticmethod
    def create(host: str, port: int, rank: int, world_size: int, store_timeout: int = 300) -> StatelessProcessGroup:
        store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timedelta(seconds=store_timeout))
        return StatelessProcessGroup(rank=rank, world_size=world_size, store=store)
