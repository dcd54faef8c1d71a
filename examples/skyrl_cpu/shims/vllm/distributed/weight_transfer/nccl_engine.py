"""``NCCLWeightTransferEngine`` with vLLM's trainer-side interface, carrying weights over Ray.

skyrl's ``BroadcastTransferStrategy.create_sender`` calls ``trainer_init`` on the policy's rank 0
and ``BroadcastWeightTransferSender.send_chunks`` calls ``trainer_send_weights`` with the full
(gathered) named tensors. Here the "group" is the CPU engine's Ray actor, found by name, and the
tensors go to its ``load_weights``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ray
import torch

ENGINE_ACTOR = "skyrl_cpu_hf_engine"


class NCCLWeightTransferEngine:
    """Trainer side of vLLM's NCCL weight transfer, on CPU (see the module docstring)."""

    @staticmethod
    def trainer_init(init_args: dict[str, Any]) -> Any:
        """The engine actor (``init_args``: master address, port and world size, unused here)."""
        return ray.get_actor(ENGINE_ACTOR)

    @staticmethod
    def trainer_send_weights(iterator: Iterator[tuple[str, torch.Tensor]], trainer_args: dict[str, Any]) -> None:
        """Send every ``(name, tensor)`` to the engine; returns when it has loaded them."""
        weights = {name: tensor.detach().to("cpu").clone() for name, tensor in iterator}
        ray.get(trainer_args["group"].load_weights.remote(weights))
