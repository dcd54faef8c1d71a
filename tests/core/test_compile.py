"""``torch.compile(fullgraph=True)`` over a function that calls a registry loss.

``fullgraph=True`` turns any graph break into an error, so each test fails if Dynamo
cannot trace a loss in one graph. The "aot_eager" backend also traces forward and backward
with AOTAutograd (the fused paths' ``autograd.Function`` backward included) and runs the
traced graphs, whose loss, metrics and gradient are compared with the uncompiled call.
Inductor would compile C++ for minutes on a small CPU machine; the CUDA test uses it.
The Triton path is a pair of custom operators (``rowsum_triton``): tested here under
Triton's CPU interpreter (the ``kernels`` nox session) or on CUDA.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch._dynamo

from gmpo_plugins import BatchInfo, LossInputs, get_loss, list_losses
from gmpo_plugins.core.kernels.dispatch import triton_importable, triton_interpreter

from .batches import complete

LOSSES = [spec.name for spec in list_losses()]
# Dynamo itself instantiates torch.autograd.Function while it traces any autograd.Function
# (torch/_dynamo/side_effects.py, track_object_new), which torch then warns about; not this code's doing
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*torch.autograd.function.Function'> should not be instantiated:DeprecationWarning"
)
TRITON_RUNS = triton_importable() and (torch.cuda.is_available() or triton_interpreter())


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every test compiles from scratch (no cache entries or recompile counts carried over)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _inputs(device: str = "cpu", dtype: torch.dtype = torch.float32, batch: int = 6, length: int = 40):
    g = torch.Generator().manual_seed(0)
    old = -3 * torch.rand(batch, length, generator=g)
    log_probs = old + 0.4 * torch.randn(batch, length, generator=g)
    mask = torch.rand(batch, length, generator=g) < 0.8
    mask[1] = False  # an empty row
    advantages = torch.randn(batch, generator=g)
    advantages[2] = 0.0
    return (log_probs.to(device, dtype), old.to(device, dtype), advantages.to(device, dtype), mask.to(device))


def _forward_backward(fn, log_probs, old, advantages, mask):
    leaf = log_probs.detach().clone().requires_grad_()
    loss, metrics = fn(leaf, old, advantages, mask)
    loss.backward()
    return loss.detach(), {k: v.detach() for k, v in metrics.items()}, leaf.grad


def _assert_same(compiled, eager, rtol=1e-6):
    (loss_c, metrics_c, grad_c), (loss_e, metrics_e, grad_e) = compiled, eager
    torch.testing.assert_close(loss_c, loss_e, rtol=rtol, atol=0)
    assert sorted(metrics_c) == sorted(metrics_e)
    for key in metrics_e:
        torch.testing.assert_close(metrics_c[key], metrics_e[key], rtol=rtol, atol=1e-7, msg=key)
    torch.testing.assert_close(grad_c, grad_e, rtol=rtol, atol=0)
    assert bool((grad_c != 0).any())  # a gradient flowed through the compiled graph


@pytest.mark.parametrize("name", LOSSES)
def test_registry_loss_compiles_in_one_graph(name):
    """spec(inputs, batch, validate=False) inside torch.compile(fullgraph=True): no graph
    break, forward and backward traced, same loss, metrics and gradient as uncompiled."""
    spec = get_loss(name)
    batch = BatchInfo(dp_size=1, global_batch_size=6)
    inputs = _inputs()
    extra = {field: getattr(complete(LossInputs(*inputs), name), field) for field in spec.requires}

    def step(log_probs, old, advantages, mask):
        out = spec(LossInputs(log_probs, old, advantages, mask, **extra), batch, validate=False)
        return out.loss, out.metrics

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    _assert_same(_forward_backward(compiled, *inputs), _forward_backward(step, *inputs))


def test_no_graph_break_reported_by_explain():
    """torch._dynamo.explain agrees: one graph, no break, for gmpo and grpo."""
    for name in ("gmpo", "grpo"):
        spec = get_loss(name)

        def step(log_probs, old, advantages, mask, spec=spec):
            return spec(LossInputs(log_probs, old, advantages, mask), validate=False).loss

        report = torch._dynamo.explain(step)(*_inputs())
        assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons


def test_changing_hyper_parameters_stay_in_one_graph():
    """A hyper-parameter that changes between calls (an eps schedule) makes Dynamo recompile
    with a symbolic float; the value checks must accept it without a graph break."""
    spec = get_loss("gmpo")

    def step(log_probs, old, advantages, mask, eps_high):
        out = spec(LossInputs(log_probs, old, advantages, mask), validate=False, eps_high=eps_high)
        return out.loss, out.metrics

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    inputs = _inputs()
    for eps_high in (0.3, 0.35, 0.45):
        got = _forward_backward(functools.partial(compiled, eps_high=eps_high), *inputs)
        want = _forward_backward(functools.partial(step, eps_high=eps_high), *inputs)
        _assert_same(got, want)


@pytest.mark.skipif(not TRITON_RUNS, reason="triton not installed, or neither CUDA nor TRITON_INTERPRET=1")
@pytest.mark.parametrize("name", ["gmpo", "gspo"])
def test_triton_path_compiles_in_one_graph(name):
    """impl="triton" (two custom operators around the Triton kernels) compiles without a
    graph break and gives the uncompiled Triton path's numbers."""
    spec = get_loss(name)
    params = dict(spec.defaults)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def step(log_probs, old, advantages, mask):
        out = spec.fn(LossInputs(log_probs, old, advantages, mask), BatchInfo(), impl="triton", **params)
        return out.loss, out.metrics

    inputs = _inputs(device)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    _assert_same(_forward_backward(compiled, *inputs), _forward_backward(step, *inputs))


@pytest.mark.cuda
@pytest.mark.skipif(not (torch.cuda.is_available() and triton_importable()), reason="needs CUDA and triton")
@pytest.mark.parametrize("name", ["gmpo", "grpo"])
def test_inductor_on_cuda(name):
    """The registry path on CUDA (Triton custom operators for gmpo), compiled by inductor,
    in bf16: same numbers as uncompiled (inductor may fuse and reorder the (B,) epilogue)."""
    spec = get_loss(name)

    def step(log_probs, old, advantages, mask):
        out = spec(LossInputs(log_probs, old, advantages, mask), validate=False)
        return out.loss, out.metrics

    inputs = _inputs("cuda", torch.bfloat16, batch=16, length=300)
    compiled = torch.compile(step, fullgraph=True)
    _assert_same(_forward_backward(compiled, *inputs), _forward_backward(step, *inputs), rtol=1e-5)
