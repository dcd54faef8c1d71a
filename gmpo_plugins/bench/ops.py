"""Count the operators one forward+backward dispatches, with a ``TorchDispatchMode``.

Every call that reaches torch's dispatcher below autograd is seen once: the forward ops,
the backward ops the autograd engine runs (it carries the mode to its threads) and the
custom operators (the Triton launches count one each). On CPU the count stands in for
the kernel launches the same code makes on CUDA, where each op is at least one launch.

    aten_ops      every dispatched op
    compute_ops   those that read or write tensor data: views (``OpOverload.is_view``:
                  select, slice, view, expand, detach ...), allocations (``empty*``) and
                  dtype promotion (``promote_types``) are left out, as they launch nothing
    expanded_compute_ops
                  compute_ops with the custom operators whose body is torch code
                  (``kernels.sequence_rows.TORCH_IMPLEMENTED_OPS``: on CPU the blocked pass
                  and the per-row epilogue) counted op by op instead of once
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gmpo_plugins.core.kernels.sequence_rows import TORCH_IMPLEMENTED_OPS

_NO_DATA = ("aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.promote_types")


class OpCount(NamedTuple):
    """Ops of one call: all of them, those that touch data, the count of each by name, and
    the ops that touch data with torch-implemented custom operators expanded."""

    aten_ops: int
    compute_ops: int
    by_name: dict[str, int]
    expanded_compute_ops: int


def _touches_data(op: torch._ops.OpOverload) -> bool:
    packet = f"{op.namespace}.{op._opname}"
    return not (getattr(op, "is_view", False) or packet in _NO_DATA)


class _Counter(TorchDispatchMode):
    def __init__(self, expand: bool = False) -> None:
        super().__init__()
        self.names: Counter[str] = Counter()
        self.compute = 0
        self.expand = expand

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        body = TORCH_IMPLEMENTED_OPS.get(f"{func.namespace}.{func._opname}") if self.expand else None
        if body is not None:
            with self:  # the mode is off while it handles an op: back on for the body's ops
                return body(*args, **(kwargs or {}))
        self.names[f"{func.namespace}.{func._opname}.{func._overloadname}"] += 1
        self.compute += _touches_data(func)
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[[], object]) -> OpCount:
    """Run ``fn()`` twice under the counting mode: as dispatched, and with the
    torch-implemented custom operators expanded."""
    with _Counter() as counter:
        fn()
    with _Counter(expand=True) as expanded:
        fn()
    return OpCount(sum(counter.names.values()), counter.compute, dict(counter.names.most_common()), expanded.compute)
