"""The environment, the automatic backend choice and a numeric self-check of every loss
(``gmpo-plugins doctor``).

    environment   python, torch, CUDA (torch's build and the device), triton versions
    impl choice   the backend ``impl="auto"`` picks per device and log_probs dtype
                  (``dispatch.select_backend``; on CUDA this runs the Triton check first)
    numeric       every registry loss through every ``impl`` it accepts that this machine
                  can run, on one small batch (``make_case``: B = 6, T = 33, float32, on
                  every device here) against its eager oracle: loss and gradient within
                  RTOL relative (ATOL absolute); a loss without an eager oracle (a plugin's,
                  or one with no fused path) must give a finite loss and gradient
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

import torch

from gmpo_plugins.bench.variants import make_case
from gmpo_plugins.core.kernels.dispatch import backend_name, select_backend, triton_importable
from gmpo_plugins.core.registry import list_losses
from gmpo_plugins.core.spec import LossSpec

RTOL = 1e-5
ATOL = 1e-6
SHAPE = (6, 33)
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


@dataclass(frozen=True)
class NumericCheck:
    """One (loss, impl, device) of the numeric self-check: ``ok`` False with ``detail``
    saying what differed (or what was raised)."""

    loss: str
    impl: str
    device: str
    ok: bool
    detail: str


def devices() -> list[str]:
    """The devices checked here: cpu, and cuda when torch sees a GPU."""
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def environment() -> dict[str, str | None]:
    """Versions of python, torch, torch's CUDA build, the GPU (None without one) and triton
    (None when it does not import)."""
    triton_version = None
    if triton_importable():
        import triton

        triton_version = str(triton.__version__)
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "triton": triton_version,
    }


def impl_choices() -> dict[str, dict[str, str]]:
    """{device: {dtype name: backend ``impl="auto"`` uses}} for every device here."""
    choices = {}
    for device in devices():
        row = {}
        for dtype in DTYPES:
            probe = torch.zeros(1, 1, dtype=dtype, device=device)
            row[str(dtype).removeprefix("torch.")] = backend_name(select_backend("auto", probe))
        choices[device] = row
    return choices


def _loss_and_grad(spec: LossSpec, device: str, impl: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    case = make_case(*SHAPE, torch.float32, torch.device(device), seed=1, requires=spec.requires)
    if impl is None:
        out = spec(case.inputs, case.batch)
    else:
        out = spec.fn(case.inputs, case.batch, impl=impl, **dict(spec.defaults))
    out.loss.backward()
    grad = case.log_probs.grad
    assert grad is not None  # make_case's log_probs is a leaf that requires grad
    return out.loss.detach().double(), grad.double()


def _runnable(impl: str, device: str) -> bool:
    if impl == "eager":
        return False  # the oracle itself
    try:
        select_backend(impl, torch.zeros(1, 1, device=device))  # type: ignore[arg-type]  # one of spec.impls
    except ValueError:  # e.g. impl="triton" without triton, or on CPU without the interpreter
        return False
    return True


def _compare(spec: LossSpec, impl: str, device: str) -> NumericCheck:
    want_loss, want_grad = _loss_and_grad(spec, device, "eager")
    got_loss, got_grad = _loss_and_grad(spec, device, impl)
    for what, got, want in (("loss", got_loss, want_loss), ("gradient", got_grad, want_grad)):
        if not torch.allclose(got, want, rtol=RTOL, atol=ATOL):
            difference = float((got - want).abs().max())
            return NumericCheck(spec.name, impl, device, False, f"{what} differs from eager by {difference:.3g}")
    return NumericCheck(spec.name, impl, device, True, f"loss {float(got_loss):.6g}, matches eager")


def _finite(spec: LossSpec, device: str) -> NumericCheck:
    loss, grad = _loss_and_grad(spec, device, None)
    ok = bool(torch.isfinite(loss)) and bool(torch.isfinite(grad).all())
    detail = f"loss {float(loss):.6g} (no eager oracle: finite loss and gradient checked)"
    return NumericCheck(spec.name, "registry", device, ok, detail if ok else "non-finite loss or gradient")


def numeric_checks() -> list[NumericCheck]:
    """One ``NumericCheck`` per registry loss, impl and device (module docstring)."""
    checks = []
    for spec in list_losses():
        for device in devices():
            impls = [impl for impl in spec.impls if _runnable(impl, device)] if "eager" in spec.impls else [None]
            for impl in impls:
                try:
                    checks.append(_finite(spec, device) if impl is None else _compare(spec, impl, device))
                except Exception as error:  # noqa: BLE001 - a loss that raises fails the check, named
                    detail = f"{type(error).__name__}: {error}"
                    checks.append(NumericCheck(spec.name, impl or "registry", device, False, detail))
    return checks
