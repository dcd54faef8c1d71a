"""vLLM's NCCL weight-transfer engines, trainer side, carrying weights over Ray (CPU runs only).

skyrl sends the policy's weights to the inference engines through this module of vLLM; vLLM and
NCCL need a GPU. Here the "group" is the CPU engine's Ray actor (``skyrl_cpu.engine.HFEngine``),
found by name, and the full named tensors go to its ``load_weights``. Two interfaces, one per
SkyRL release:

``NCCLWeightTransferEngine`` (skyrl 0.3.0): ``BroadcastTransferStrategy.create_sender`` calls
``trainer_init`` on the policy's rank 0 and ``BroadcastWeightTransferSender.send_chunks`` calls
``trainer_send_weights`` with the full (gathered) named tensors.

``NCCLTrainerInitInfo`` / ``NCCLTrainerWeightTransferEngine`` (skyrl 0.4.0): SkyRL subclasses
both (``weight_sync/weight_senders.py``), and its ``build_trainer_engine`` builds the engine on
every policy rank through ``factory.WeightTransferTrainerFactory.trainer_init(init_info,
client=..., source=...)``; ``Worker._sync_weights_to_inference_engines`` then calls
``send_weights()`` on every rank. The source is SkyRL's own (``FsdpWeightSource``: the policy's
FSDP2 parameters gathered with ``full_tensor()``, a collective), so every rank iterates it, as
vLLM's non-sender ranks replay the collectives; rank 0 sends. The control-plane client
(SkyRL's HTTP client of the vLLM servers' weight-update routes) is kept but never called: no
HTTP server runs on CPU, and ``HFEngine.load_weights`` is the whole update (it counts the
weight versions).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import ray
import torch

from vllm.distributed.weight_transfer.packed_tensor import DEFAULT_PACKED_BUFFER_SIZE_BYTES

ENGINE_ACTOR = "skyrl_cpu_hf_engine"


def _send(engine: Any, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Every ``(name, tensor)`` to the engine actor; returns when it has loaded them."""
    weights = {name: tensor.detach().to("cpu").clone() for name, tensor in named_tensors}
    ray.get(engine.load_weights.remote(weights))


class NCCLWeightTransferEngine:
    """Trainer side of vLLM's NCCL weight transfer as skyrl 0.3.0 calls it (module docstring)."""

    @staticmethod
    def trainer_init(init_args: dict[str, Any]) -> Any:
        """The engine actor (``init_args``: master address, port and world size, unused here)."""
        return ray.get_actor(ENGINE_ACTOR)

    @staticmethod
    def trainer_send_weights(iterator: Iterator[tuple[str, torch.Tensor]], trainer_args: dict[str, Any]) -> None:
        """Send every ``(name, tensor)`` to the engine; returns when it has loaded them."""
        _send(trainer_args["group"], iterator)


@dataclass
class NCCLTrainerInitInfo:
    """vLLM's init info of the NCCL trainer engine (the rendezvous fields are unused here)."""

    backend: ClassVar[str] = "nccl"
    master_address: str = ""
    master_port: int = 0
    world_size: int = 1
    packed: bool = False
    packed_buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES
    rank: int = 0


class NCCLTrainerWeightTransferEngine:
    """Trainer side of vLLM's NCCL weight transfer as skyrl 0.4.0 calls it (module docstring)."""

    init_info_cls = NCCLTrainerInitInfo

    def __init__(self, init_info: NCCLTrainerInitInfo, client: Any = None, source: Any = None) -> None:
        self.init_info = init_info
        self.client = client
        self.source = source
        self.engine = ray.get_actor(ENGINE_ACTOR) if init_info.rank == 0 else None

    def send_weights(self) -> None:
        """Iterate the source on every rank (its gathers are collectives); rank 0 sends."""
        if self.engine is None:
            for _ in self.source:
                pass
            return
        _send(self.engine, self.source)

    def shutdown(self) -> None:
        return None
