"""``impl="auto"`` uses the Triton kernels only after they matched the torch backend on the
device (``core/kernels/verify.py``): both outcomes, run on CPU in Triton's interpreter with
the automatic choice opened to CPU (``dispatch.AUTO_TRITON_DEVICES``), the wrong outcome
made by a deliberately wrong kernel result."""

from __future__ import annotations

import warnings

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.core.kernels import dispatch, select_backend, verify
from gmpo_plugins.core.kernels.dispatch import backend_name, triton_importable, triton_interpreter
from gmpo_plugins.core.kernels.verify import TritonFallbackWarning

interpreted = pytest.mark.skipif(
    not (triton_importable() and triton_interpreter()), reason="needs triton and TRITON_INTERPRET=1"
)


@pytest.mark.cuda
@pytest.mark.skipif(not (torch.cuda.is_available() and triton_importable()), reason="needs CUDA and triton")
def test_triton_kernels_pass_their_check_on_cuda():
    """On a GPU (scripts/gpu_check.sh), the compiled kernels give the torch backend's numbers."""
    assert verify.disagreement(torch.device("cuda")) is None


@pytest.fixture
def auto_on_cpu(monkeypatch):
    """``impl="auto"`` considers Triton on CPU, with no verdict kept yet."""
    monkeypatch.setattr(dispatch, "AUTO_TRITON_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(verify, "_TRUSTED", {})


def float32_row() -> torch.Tensor:
    return torch.zeros(2, 3)


def gmpo_on(impl: str):
    """gmpo's loss and gradient through ``impl`` on a small batch with a clipped token."""
    r = torch.tensor([[0.6, 0.1, -0.2], [-0.9, 0.3, 0.0]])
    log_probs = torch.zeros_like(r, requires_grad=True)
    inputs = LossInputs(log_probs, -r, torch.tensor([1.0, -2.0]), torch.tensor([[1, 1, 1], [1, 1, 0]]).bool())
    spec = get_loss("gmpo")
    out = spec.fn(inputs, BatchInfo(), impl=impl, **spec.defaults)
    out.loss.backward()
    return out.loss.detach(), log_probs.grad


@interpreted
def test_triton_matching_torch_is_used_by_auto(auto_on_cpu):
    with warnings.catch_warnings():
        warnings.simplefilter("error", TritonFallbackWarning)
        assert backend_name(select_backend("auto", float32_row())) == "triton"
    assert verify._TRUSTED == {"cpu": True}
    assert backend_name(select_backend("auto", torch.zeros(2, 3, dtype=torch.float64))) == "torch"  # no fp64 kernel


def wrong_forward(real):
    def forward(*args):
        sums, active = real(*args)
        return sums * 1.001, active  # every statistic off by 0.1 %

    return forward


def wrong_backward(real):
    def backward(active, coef, dtype):
        return real(active, coef * 2, dtype)

    return backward


def raising_forward(real):
    def forward(*args):
        raise RuntimeError("no kernel image is available for execution on the device")

    return forward


@interpreted
@pytest.mark.parametrize(
    "attribute, make, named",
    [
        ("forward", wrong_forward, "forward row statistics"),
        ("backward", wrong_backward, "backward gradient"),
        ("forward", raising_forward, "RuntimeError: no kernel image"),
    ],
)
def test_triton_disagreeing_with_torch_falls_back_with_one_warning(auto_on_cpu, monkeypatch, attribute, make, named):
    from gmpo_plugins.core.kernels import rowsum_triton

    monkeypatch.setattr(rowsum_triton, attribute, make(getattr(rowsum_triton, attribute)))
    with pytest.warns(TritonFallbackWarning, match=named) as caught:
        assert backend_name(select_backend("auto", float32_row())) == "torch"
        assert backend_name(select_backend("auto", float32_row())) == "torch"  # verdict kept, no second warning
        loss, grad = gmpo_on("auto")
    assert len([w for w in caught if issubclass(w.category, TritonFallbackWarning)]) == 1
    assert verify._TRUSTED == {"cpu": False}
    want_loss, want_grad = gmpo_on("torch")
    assert torch.equal(loss, want_loss) and torch.equal(grad, want_grad)  # auto ran the torch backend
    assert backend_name(select_backend("triton", float32_row())) == "triton"  # asked for by name: still runs


@interpreted
def test_triton_check_batch_exercises_both_sides_and_the_guard():
    """The check's batch clips on both sides, guards +-30 and has padding, so a kernel wrong
    in any of these shows up (counted with the torch backend)."""
    log_probs, old, mask, lo, hi, _ = verify.check_batch(torch.device("cpu"))
    sums, active = verify.rowsum_torch.forward(log_probs, old, mask, lo, hi)
    below, above = sums[3], sums[4]
    assert below[[0, 2]].sum() > 0 and above[[1, 3]].sum() > 0  # eps bounds bind on each side
    assert (~active & mask).sum() >= 5  # at least the five +-30 tokens are inactive
    assert sums[2].tolist() == [70, 70, 70, 70, 40]


@interpreted
# Dynamo instantiates torch.autograd.Function while tracing one, which torch warns about (test_compile.py)
@pytest.mark.filterwarnings("ignore:.*torch.autograd.function.Function'> should not be instantiated:DeprecationWarning")
def test_triton_check_runs_once_under_torch_compile(auto_on_cpu):
    """The verdict is a constant to ``torch.compile`` (the check runs eagerly while the
    first graph is traced): ``impl="auto"`` compiles in one graph and gives the eager numbers."""

    spec = get_loss("gmpo")

    def step(log_probs):
        old = torch.zeros_like(log_probs)
        inputs = LossInputs(log_probs, old, torch.tensor([1.0, -2.0]), torch.ones_like(log_probs, dtype=torch.bool))
        return spec.fn(inputs, BatchInfo(), impl="auto", **spec.defaults).loss

    torch._dynamo.reset()
    log_probs = torch.tensor([[0.6, 0.1, -0.2], [-0.9, 0.3, 0.0]], requires_grad=True)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(log_probs)
    assert verify._TRUSTED == {"cpu": True}
    assert compiled.item() == pytest.approx(step(log_probs).item(), rel=1e-6)
