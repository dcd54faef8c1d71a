"""The Triton kernels checked against the torch backend before ``impl="auto"`` uses them.

The first ``impl="auto"`` call of a process on a device where Triton would be chosen runs
both backends of ``clipped_row_sums`` on one small fixed batch on that device and compares

    forward   the (8, B) row statistics (clipped sum, raw sum, count, clipped counts on
              each side, raw min and max, non-finite count) and the (B, T) active mask
    backward  the (B, T) gradient for one coefficient per row

within ``RTOL`` relative (``ATOL`` absolute) in float32. They agree: this device uses
Triton from then on. They differ, or the kernel fails to compile or run: this device uses
the torch backend for the rest of the process, after one ``TritonFallbackWarning`` saying
what differed. The verdict is kept per device (``_TRUSTED``), so the check costs one small
forward and backward per device and process, and synchronises with the device once, in
that first call (``torch.cuda`` sync debug mode is switched off for it and restored).

``impl="triton"`` is never checked: asking for it by name runs it.
"""

from __future__ import annotations

import warnings
from types import ModuleType

import torch

from gmpo_plugins.core.kernels import rowsum_torch

SHAPE = (5, 70)
"""(B, T) of the check's batch: rows longer than one Triton block of the backward pass
(64) and a row of padding on the last 30 tokens."""
RTOL = 1e-5
ATOL = 1e-6

_TRUSTED: dict[str, bool] = {}


class TritonFallbackWarning(UserWarning):
    """``impl="auto"`` found the Triton kernels disagreeing with the torch backend on a
    device (or failing there) and uses the torch backend on it."""


def triton_trusted(device: str) -> bool:
    """Whether ``impl="auto"`` may use the Triton kernels on ``device`` (``str`` of a
    ``torch.device``): the verdict of ``disagreement`` on it, computed once per process."""
    if device not in _TRUSTED:
        problem = disagreement(torch.device(device))
        if problem is not None:
            warnings.warn(
                f"gmpo_plugins: the Triton kernels disagree with the torch backend on {device} "
                f"({problem}); impl='auto' uses the torch backend on this device for the rest of "
                "the process (impl='triton' still runs them when asked for by name)",
                TritonFallbackWarning,
                stacklevel=2,
            )
        _TRUSTED[device] = problem is None
    return _TRUSTED[device]


def check_batch(device: torch.device) -> tuple[torch.Tensor, ...]:
    """(log_probs, old_log_probs, mask, lo, hi, coef) of the check, float32 on ``device``:
    log ratios ~ N(0, 0.5^2) with one token at +-30 per row (beyond the guard), row bounds
    of both signs' eps and the guard, the last row padded after its 40th token."""
    batch, length = SHAPE
    g = torch.Generator().manual_seed(0)
    old = -3.0 * torch.rand(batch, length, generator=g)
    log_ratio = 0.5 * torch.randn(batch, length, generator=g)
    log_ratio[torch.arange(batch), torch.arange(batch) * 7] = torch.tensor([30.0, -30.0, 30.0, -30.0, 30.0])
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[-1, 40:] = False
    lo = torch.tensor([-0.4, -20.0, -0.2, -20.0, -0.4])
    hi = torch.tensor([20.0, 0.4, 20.0, 0.3, 20.0])
    coef = torch.tensor([-1.5, 0.25, 2.0, -0.75, 1.0])
    tensors = (old + log_ratio, old, mask, lo, hi, coef)
    return tuple(t.to(device) for t in tensors)


def disagreement(device: torch.device) -> str | None:
    """None when the Triton backend gives the torch backend's numbers on ``device``;
    else what differs (or the exception the kernels raised), for the warning."""
    from gmpo_plugins.core.kernels import rowsum_triton  # the dispatcher checked that triton imports

    restore = None
    if device.type == "cuda":  # the check reads values once; a no-sync debug mode must not stop it
        restore = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(0)
    try:
        return _compare(rowsum_triton, device)
    except Exception as error:  # noqa: BLE001 - any failure of the kernels means: do not use them
        return f"the kernels raised {type(error).__name__}: {error}"
    finally:
        if restore is not None:
            torch.cuda.set_sync_debug_mode(restore)


def _compare(triton_backend: ModuleType, device: torch.device) -> str | None:
    log_probs, old, mask, lo, hi, coef = check_batch(device)
    with torch.no_grad():
        want_sums, want_active = rowsum_torch.forward(log_probs, old, mask, lo, hi)
        got_sums, got_active = triton_backend.forward(log_probs, old, mask, lo, hi)
        want_grad = rowsum_torch.backward(want_active, coef, torch.float32)
        got_grad = triton_backend.backward(want_active, coef, torch.float32)
    checks = (
        ("forward row statistics", got_sums.to(torch.float32), want_sums),
        ("forward active mask", got_active, want_active),
        ("backward gradient", got_grad, want_grad),
    )
    for what, got, want in checks:
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"{what}: shape/dtype {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}"
        if want.dtype == torch.bool:
            same = torch.equal(got, want)
        else:
            same = torch.allclose(got, want, rtol=RTOL, atol=ATOL)
        if not same:
            return f"{what}: max difference {_max_difference(got, want)}"
    return None


def _max_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    if want.dtype == torch.bool:
        return f"{int((got != want).sum())} of {want.numel()} entries"
    return f"{float((got.double() - want.double()).abs().max()):.3g}"
