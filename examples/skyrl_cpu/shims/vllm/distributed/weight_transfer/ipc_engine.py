"""Stand-in for vLLM's CUDA-IPC trainer engine, CPU runs only.

skyrl 0.4.0 registers a subclass of it next to the NCCL one on every policy rank
(``weight_sync/register.py``), so the names must exist; it is selected only when training and
inference share GPUs (``placement.colocate_all``), and CUDA IPC has no CPU counterpart, so
building one fails with a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from vllm.distributed.weight_transfer.packed_tensor import DEFAULT_PACKED_BUFFER_SIZE_BYTES


@dataclass
class IPCTrainerInitInfo:
    backend: ClassVar[str] = "ipc"
    packed: bool = False
    packed_buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES
    rank: int = 0


class IPCTrainerWeightTransferEngine:
    """Never built on CPU (module docstring)."""

    init_info_cls = IPCTrainerInitInfo

    def __init__(self, init_info: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "skyrl_cpu: CUDA-IPC weight sync (placement.colocate_all=true) has no CPU stand-in; "
            "use trainer.placement.colocate_all=false"
        )
