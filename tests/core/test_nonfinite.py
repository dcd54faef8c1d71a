"""Non-finite inputs, one rule on every path (``core/prepared.py``'s module docstring).

A NaN, +inf or -inf at one valid (mask true) position of any input: with ``validate=True``
a ValueError naming that input; with ``validate=False`` a non-finite loss, on every path of
every built-in loss (each ``impl`` its spec lists, the registry call compiled with
``aot_eager``, and ``fused_linear_loss``), with ``nonfinite_tokens`` counting the token when
the input is a log-prob. A -inf log-prob is no exception. The losses come from the
registry, so a built-in loss added later is covered without a list to edit. Triton runs
in the ``kernels`` session only (``-k triton``, TRITON_INTERPRET=1); padding's inertness is
``test_robustness.py``'s.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch._dynamo

from gmpo_plugins import BatchInfo, LossInputs, fused_linear_loss, get_loss
from gmpo_plugins.core.kernels.dispatch import triton_importable, triton_interpreter

from ..registry_names import builtin_losses

B, T, H, V = 3, 5, 4, 7
INPUTS = ("log_probs", "old_log_probs", "advantages", "ref_log_probs", "rollout_is_weights")
KINDS = (math.nan, math.inf, -math.inf)
TRITON_RUNS = triton_importable() and (torch.cuda.is_available() or triton_interpreter())
TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Dynamo instantiates torch.autograd.Function while tracing one, which torch warns about (test_compile.py)
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*torch.autograd.function.Function'> should not be instantiated:DeprecationWarning"
)


def _paths() -> list:
    """(loss, path): every impl the spec lists, then "compiled" and "fused_linear"."""
    needs_triton = pytest.mark.skipif(
        not TRITON_RUNS, reason="triton not installed, or neither CUDA nor TRITON_INTERPRET=1"
    )
    return [
        pytest.param(name, path, marks=[needs_triton] if path == "triton" else [], id=f"{name}-{path}")
        for name in builtin_losses()
        for path in (*get_loss(name).impls, "compiled", "fused_linear")
    ]


def _batch() -> dict[str, torch.Tensor]:
    """B = 3 rows, row 2 padded after its 3rd token; every optional input given ((B, T) IS weights)."""
    g = torch.Generator().manual_seed(0)
    old = -3 * torch.rand(B, T, generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[2, 3:] = False
    return {
        "hidden": torch.randn(B, T, H, generator=g),
        "weight": torch.randn(V, H, generator=g),
        "targets": torch.randint(0, V, (B, T), generator=g),
        "log_probs": old + 0.3 * torch.randn(B, T, generator=g),
        "old_log_probs": old,
        "advantages": torch.tensor([1.0, -0.5, 0.8]),
        "mask": mask,
        "ref_log_probs": old + 0.1,
        "rollout_is_weights": 0.5 + torch.rand(B, T, generator=g),
        "rollout_log_probs": old - 0.05,  # given to a loss that requires it (LossSpec.requires)
        "rewards": torch.tensor([1.0, 0.0, -1.0]),
    }


def _poisoned(name: str, kind: float, path: str) -> dict[str, torch.Tensor]:
    """The batch with ``kind`` at the valid position (0, 1) of input ``name`` (row 0 of a (B,)
    one); on fused_linear a log-prob is set through its hidden states there."""
    tensors = _batch()
    key = "hidden" if name == "log_probs" and path == "fused_linear" else name
    poisoned = tensors[key].clone()
    poisoned[(0,) if poisoned.dim() == 1 else (0, 1)] = kind
    tensors[key] = poisoned
    return tensors


def _run(loss: str, path: str, tensors: dict[str, torch.Tensor], validate: bool) -> tuple[torch.Tensor, dict]:
    """The loss and metrics of ``loss`` on ``path`` (kl_beta 0.1: the reference is used). A loss
    that requires an optional input gets it; one whose own correction computes IS weights runs
    with ``rollout_is=None``, so that the given IS weights are its."""
    spec = get_loss(loss)
    extra: dict = {name: tensors[name] for name in spec.requires}
    if spec.correction.get("rollout_is") is not None:
        extra["rollout_is"] = None
    if path == "fused_linear":
        out = fused_linear_loss(
            loss,
            tensors["hidden"],
            tensors["weight"].requires_grad_(),
            tensors["targets"],
            tensors["old_log_probs"],
            tensors["advantages"],
            tensors["mask"],
            ref_log_probs=tensors["ref_log_probs"],
            rollout_is_weights=tensors["rollout_is_weights"],
            validate=validate,
            kl_beta=0.1,
            **extra,
        )
        return out.loss, out.metrics
    names = ("log_probs", "old_log_probs", "advantages", "mask", "ref_log_probs", "rollout_is_weights")
    device = TRITON_DEVICE if path == "triton" else "cpu"
    args = [tensors[name].to(device) for name in names]
    args[0] = args[0].requires_grad_()

    def step(*args: torch.Tensor) -> tuple[torch.Tensor, dict]:
        impl = None if path == "compiled" else path
        inputs = LossInputs(*args, **{name: extra[name].to(device) for name in spec.requires})
        hparams = {key: value for key, value in extra.items() if key not in spec.requires}
        out = spec(inputs, BatchInfo(), validate=validate, impl=impl, kl_beta=0.1, **hparams)
        return out.loss, out.metrics

    if path == "compiled":
        step = _compiled(step)
    return step(*args)


def _compiled(step):
    return torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=False)


@pytest.mark.parametrize(("loss", "path"), _paths())
def test_a_non_finite_input_gives_a_non_finite_loss(loss, path):
    """validate=False: NaN, +inf or -inf at one valid position of each input -> a non-finite
    loss; nonfinite_tokens = 1 for a log-prob or old log-prob, 0 for the other inputs."""
    torch._dynamo.reset()
    finite = []
    for name in INPUTS:
        for kind in KINDS:
            loss_value, metrics = _run(loss, path, _poisoned(name, kind, path), validate=False)
            if bool(torch.isfinite(loss_value)):
                finite.append((name, kind, float(loss_value.detach())))
            expected = 1.0 if name in ("log_probs", "old_log_probs") else 0.0
            assert metrics["nonfinite_tokens"].item() == expected, (name, kind, metrics["nonfinite_tokens"])
    assert not finite, f"{loss} on {path}: finite losses for non-finite inputs {finite}"
    clean, metrics = _run(loss, path, _batch(), validate=False)
    assert bool(torch.isfinite(clean)) and metrics["nonfinite_tokens"].item() == 0.0  # the batch itself is fine


@pytest.mark.parametrize(("loss", "path"), [p for p in _paths() if p.values[1] != "compiled"])
def test_validation_names_the_non_finite_input(loss, path):
    """validate=True: a ValueError naming the input (hidden_states for fused_linear's log-probs)."""
    for name in INPUTS:
        named = "hidden_states" if path == "fused_linear" and name == "log_probs" else name
        for kind in KINDS:
            with pytest.raises(ValueError, match=rf"^{named}: expected finite values at valid \(mask=True\) positions"):
                _run(loss, path, _poisoned(name, kind, path), validate=True)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_is_not_counted(kind):
    """The same values at a masked position: a finite loss, nonfinite_tokens 0 (every path of
    the padding property test in test_robustness.py; here the metric)."""
    tensors = _batch()
    for name in INPUTS[:2]:
        tensors[name] = tensors[name].clone()
        tensors[name][2, 4] = kind
    for path in ("eager", "torch"):
        loss_value, metrics = _run("gmpo", path, tensors, validate=False)
        assert bool(torch.isfinite(loss_value)) and metrics["nonfinite_tokens"].item() == 0.0
