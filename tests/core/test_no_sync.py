"""No host-device synchronisation in any built-in loss path with validate=False.

On CPU a synchronisation shows up as Python reading a tensor's value: ``.item()``,
``.tolist()``, ``bool()`` (an ``if`` on a tensor), ``int()``/``float()``/``index()``.
These are made to raise while the loss runs forward and backward; every built-in
loss is called with every input layout it accepts (and every ``impl`` where it has
one). On CUDA, ``torch.cuda.set_sync_debug_mode("error")`` checks the same on device.
"""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss

from ..registry_names import builtin_losses
from .batches import complete

BUILTINS = builtin_losses()
WITH_IMPL = {name for name in BUILTINS if get_loss(name).impls}
READERS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")


class SyncError(AssertionError):
    pass


@contextlib.contextmanager
def no_value_reads():
    """Make every Python-level read of a tensor's value raise SyncError."""
    originals = {name: getattr(torch.Tensor, name) for name in READERS}

    def forbid(name):
        def reader(self, *args, **kwargs):
            raise SyncError(f"Tensor.{name} called inside the loss path")

        return reader

    try:
        for name in READERS:
            setattr(torch.Tensor, name, forbid(name))
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def test_the_guard_catches_reads():
    t = torch.ones(2)
    with no_value_reads():
        for read in (lambda: t[0].item(), t.tolist, lambda: bool(t[0]), lambda: float(t[0]), lambda: int(t[0])):
            with pytest.raises(SyncError):
                read()
    assert t.tolist() == [1.0, 1.0]  # restored


def _inputs(device: str, dtype: torch.dtype, token_advantages: bool, weights: str, reference: bool, float_mask: bool):
    g = torch.Generator().manual_seed(0)
    old = -3 * torch.rand(4, 33, generator=g)
    log_probs = (old + 0.5 * torch.randn(4, 33, generator=g)).to(device, dtype).requires_grad_()
    mask = torch.rand(4, 33, generator=g) < 0.7
    mask[1] = False
    advantages = torch.tensor([1.0, -1.0, 0.0, 2.0])
    if token_advantages:
        advantages = advantages[:, None].expand(4, 33).contiguous()
    rho = {"none": None, "seq": torch.rand(4, generator=g), "token": torch.rand(4, 33, generator=g)}[weights]
    ref = old + 0.1 if reference else None
    return LossInputs(
        log_probs,
        old.to(device, dtype),
        advantages.to(device, dtype),
        (mask.float() if float_mask else mask).to(device),
        None if ref is None else ref.to(device, dtype),
        None if rho is None else rho.to(device, dtype),
    )


def _configurations(name: str):
    spec = get_loss(name)
    hparams = [{}]
    if spec.reductions:
        hparams = [{"reduction": reduction} for reduction in spec.reductions]
    if "dual_clip" in spec.defaults:
        hparams.append({"dual_clip": 3.0})
    impls = ["auto", "torch", "eager"] if name in WITH_IMPL else [None]
    batches = [
        BatchInfo(),
        BatchInfo(dp_size=2, global_batch_size=16, global_num_tokens=300),
        BatchInfo(dp_size=2, global_batch_size=torch.tensor(16), global_num_tokens=torch.tensor(300)),
    ]
    layouts = itertools.product([False, True], ["none", "seq", "token"], [False, True], [False, True])
    yield from itertools.product(hparams, impls, batches, layouts)


def _call(name, inputs, batch, hp, impl, reference):
    spec = get_loss(name)
    hp = {**hp, "kl_beta": 0.1} if reference else hp
    if impl is None:
        return spec(inputs, batch, validate=False, **hp)
    return spec.fn(inputs, batch, impl=impl, **spec.resolve(hp))


@pytest.mark.parametrize("name", BUILTINS)
def test_no_value_reads_with_validate_false(name):
    calls = 0
    for hp, impl, batch, (token_adv, weights, reference, float_mask) in _configurations(name):
        inputs = complete(_inputs("cpu", torch.float32, token_adv, weights, reference, float_mask), name)
        with no_value_reads():
            out = _call(name, inputs, batch, hp, impl, reference)
            out.loss.backward()
            assert all(isinstance(v, torch.Tensor) for v in out.metrics.values())
        assert torch.isfinite(inputs.log_probs.grad).all()
        calls += 1
    assert calls >= 48


def test_registry_call_is_checked_too():
    """The public call (spec(..., validate=False)) is covered, and validate=True does read values."""
    inputs = _inputs("cpu", torch.float32, False, "none", False, False)
    with no_value_reads():
        get_loss("gmpo")(inputs, BatchInfo(), validate=False).loss.backward()
        with pytest.raises(SyncError):
            get_loss("gmpo")(inputs, BatchInfo(), validate=True)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", BUILTINS)
def test_no_device_sync_on_cuda(name):
    for hp, impl, batch, (token_adv, weights, reference, float_mask) in _configurations(name):
        if isinstance(batch.global_batch_size, torch.Tensor):
            batch = BatchInfo(batch.dp_size, batch.global_batch_size.cuda(), batch.global_num_tokens.cuda())
        inputs = _inputs("cuda", torch.bfloat16, token_adv, weights, reference, float_mask)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = _call(name, inputs, batch, hp, impl, reference)
            out.loss.backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
