"""Which backend computes ``clipped_row_sums``.

    impl="auto"    Triton on CUDA tensors of float16/bfloat16/float32 when triton imports
                   and its kernels passed the check against the torch backend on that
                   device (``verify``: once per process and device, one warning and the
                   torch backend if they disagree); the torch backend otherwise (CPU,
                   float64, no triton)
    impl="torch"   the blocked torch backend, any device
    impl="triton"  the Triton kernels; CUDA, or CPU under TRITON_INTERPRET=1 (tests)

"eager" (the unfused reference formulation) is chosen one level up, by the losses.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import get_args

import torch

from gmpo_plugins.core.kernels.verify import triton_trusted
from gmpo_plugins.core.types import Impl

IMPLS: tuple[Impl, ...] = get_args(Impl)
SEQUENCE_IMPLS: tuple[Impl, ...] = IMPLS
"""The paths of the sequence-level built-in losses (``LossSpec.impls``)."""
TOKEN_IMPLS: tuple[Impl, ...] = ("auto", "eager", "torch")
"""The paths of the token-level built-in losses: no Triton kernel."""
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
AUTO_TRITON_DEVICES = ("cuda",)
"""Device types on which ``impl="auto"`` considers Triton (tests add "cpu" under the
interpreter to run the automatic choice, self-check included, on CPU)."""


_TRITON_IMPORTABLE: dict[str, bool] = {}


@torch.compiler.assume_constant_result  # type: ignore[untyped-decorator]  # untyped in torch
def triton_importable() -> bool:
    """True when ``triton`` imports. An installed but broken triton (driver or version
    mismatch) counts as absent, so ``impl="auto"`` falls back to the torch backend.
    Probed once; ``torch.compile`` calls it and keeps the result as a constant instead of
    tracing the import."""
    if "triton" not in _TRITON_IMPORTABLE:
        _TRITON_IMPORTABLE["triton"] = _import_triton()
    return _TRITON_IMPORTABLE["triton"]


def _import_triton() -> bool:
    if importlib.util.find_spec("triton") is None:
        return False
    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure to import means: no Triton path
        return False
    return True


@torch.compiler.assume_constant_result  # type: ignore[untyped-decorator]  # untyped in torch
def _triton_trusted_on(device: str) -> bool:
    """``verify.triton_trusted``, kept as a constant by ``torch.compile`` (the check runs
    once, eagerly, when the first graph for ``device`` is traced)."""
    return triton_trusted(device)


def triton_interpreter() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_impl(impl: str) -> None:
    """Raise ValueError unless ``impl`` is one of IMPLS."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {list(IMPLS)}, got {impl!r}")


def select_backend(impl: Impl, tensor: torch.Tensor) -> ModuleType:
    """The module (``rowsum_torch`` or ``rowsum_triton``) that runs ``impl`` on ``tensor``."""
    check_impl(impl)
    if impl == "auto":
        use_triton = (
            tensor.device.type in AUTO_TRITON_DEVICES
            and tensor.dtype in TRITON_DTYPES
            and triton_importable()
            and _triton_trusted_on(str(tensor.device))
        )
    else:
        use_triton = impl == "triton"
    if not use_triton:
        return backend_named("torch")
    if not triton_importable():
        raise ValueError("impl='triton' needs the triton package, importable (pip install triton)")
    if tensor.dtype not in TRITON_DTYPES:
        raise ValueError(f"impl='triton' supports float16, bfloat16 and float32 log_probs, got {tensor.dtype}")
    if not tensor.is_cuda and not triton_interpreter():
        raise ValueError("impl='triton' needs CUDA tensors (or TRITON_INTERPRET=1 for CPU tests)")
    return backend_named("triton")


def backend_name(backend: ModuleType) -> str:
    """``"torch"`` or ``"triton"``: the name of a module ``select_backend`` returned."""
    return "triton" if backend.__name__.endswith("triton") else "torch"


def backend_named(name: str) -> ModuleType:
    """The backend module called ``name`` (``backend_name``), chosen and checked before by
    ``select_backend``; the Triton one is imported only here."""
    if name == "triton":
        from gmpo_plugins.core.kernels import rowsum_triton

        return rowsum_triton
    from gmpo_plugins.core.kernels import rowsum_torch

    return rowsum_torch
