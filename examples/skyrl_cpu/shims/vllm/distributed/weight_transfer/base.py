"""Stand-in for vLLM's trainer-side weight contract, CPU runs only.

skyrl 0.4.0's weight sources (``weight_sync/sources.py``: ``FsdpWeightSource``, which gathers the
policy's FSDP2 shards) subclass vLLM's ``WeightSource`` and use ``ParamMeta`` and
``materialize_full_tensor`` from this module; vLLM itself needs a GPU. The three names keep
vLLM's meaning: a source declares ``metadata()`` (name, dtype, shape per tensor) and yields
``(name, full tensor)`` in the same order; ``materialize_full_tensor`` gathers a ``DTensor``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import NamedTuple

import torch


class ParamMeta(NamedTuple):
    """One tensor of a weight stream: its name, wire dtype and global shape."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]


class WeightSource(ABC):
    """What a trainer-side weight-transfer engine reads: ``metadata()`` and ``__iter__``,
    element for element in the same order."""

    @abstractmethod
    def metadata(self) -> list[ParamMeta]:
        raise NotImplementedError

    @abstractmethod
    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        raise NotImplementedError


def materialize_full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The full tensor of a (possibly sharded) ``DTensor``: a collective on every rank."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
