"""Non-finite inputs, one rule on every path (``core/prepared.py``'s module docstring).

A NaN, +inf or -inf at one valid (mask true) position of any input: with ``validate=True``
a ValueError naming that input; with ``validate=False`` a non-finite loss AND a non-finite
gradient (with respect to log_probs; on fused_linear, to the head weight), on every path of
every built-in loss (each ``impl`` its spec lists, the registry call compiled with
``aot_eager``, and ``fused_linear_loss``), with ``nonfinite_tokens`` counting the valid
positions where an input is not finite (every valid token of the row for a (B,) advantage
or reward; a loss's required inputs, ``LossSpec.requires``, are poisoned too);
with ``GMPO_PLUGINS_NONFINITE=raise`` a ValueError naming the input, row and column. A -inf
log-prob is no exception. The losses come from the
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
from gmpo_plugins.core import validation
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


def _inputs(loss: str) -> tuple[str, ...]:
    """The inputs poisoned in turn: ``INPUTS`` and the float ones the loss requires
    (``LossSpec.requires``; integer group ids hold no NaN or inf)."""
    return (*INPUTS, *(name for name in get_loss(loss).requires if name != "group_ids"))


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
        "group_ids": torch.tensor([0, 0, 0]),  # one group with both signs of advantage
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


def _run(
    loss: str, path: str, tensors: dict[str, torch.Tensor], validate: bool
) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """The loss, metrics and gradient of ``loss`` on ``path`` (kl_beta 0.1: the reference is
    used): the gradient with respect to log_probs, on fused_linear to the head weight. A loss
    that requires an optional input gets it; one whose own correction computes IS weights runs
    with ``rollout_is=None``, so that the given IS weights are its."""
    spec = get_loss(loss)
    extra: dict = {name: tensors[name] for name in spec.requires}
    if spec.correction.get("rollout_is") is not None:
        extra["rollout_is"] = None
    if path == "fused_linear":
        weight = tensors["weight"].requires_grad_()
        out = fused_linear_loss(
            loss,
            tensors["hidden"],
            weight,
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
        return out.loss, out.metrics, torch.autograd.grad(out.loss, weight)[0]
    names = ("log_probs", "old_log_probs", "advantages", "mask", "ref_log_probs", "rollout_is_weights")
    device = TRITON_DEVICE if path == "triton" else "cpu"
    args = [tensors[name].to(device) for name in names]
    args[0] = args[0].requires_grad_()

    def step(*args: torch.Tensor) -> tuple[torch.Tensor, dict]:
        impl = None if path in ("compiled", "registry") else path
        inputs = LossInputs(*args, **{name: extra[name].to(device) for name in spec.requires})
        hparams = {key: value for key, value in extra.items() if key not in spec.requires}
        out = spec(inputs, BatchInfo(), validate=validate, impl=impl, kl_beta=0.1, **hparams)
        return out.loss, out.metrics

    if path == "compiled":
        step = _compiled(step)
    loss_value, metrics = step(*args)
    return loss_value, metrics, torch.autograd.grad(loss_value, args[0])[0]


def _compiled(step):
    return torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=False)


@pytest.mark.parametrize(("loss", "path"), _paths())
def test_a_non_finite_input_gives_a_non_finite_loss_and_gradient(loss, path):
    """validate=False: NaN, +inf or -inf at one valid position of each input -> a non-finite
    loss and a non-finite gradient; nonfinite_tokens = 1, or T = 5 for the (B,) advantage
    (every valid token of row 0), also for the (B,) rewards of a loss that requires them. The
    clean batch: finite loss and gradient, count 0."""
    torch._dynamo.reset()
    finite = []
    for name in _inputs(loss):
        for kind in KINDS:
            loss_value, metrics, grad = _run(loss, path, _poisoned(name, kind, path), validate=False)
            if bool(torch.isfinite(loss_value)) or bool(torch.isfinite(grad).all()):
                finite.append((name, kind, float(loss_value.detach()), float(grad.abs().sum())))
            expected = float(T) if name in ("advantages", "rewards") else 1.0
            assert metrics["nonfinite_tokens"].item() == expected, (name, kind, metrics["nonfinite_tokens"])
    assert not finite, f"{loss} on {path}: finite loss or gradient for non-finite inputs {finite}"
    clean, metrics, grad = _run(loss, path, _batch(), validate=False)
    assert bool(torch.isfinite(clean)) and metrics["nonfinite_tokens"].item() == 0.0  # the batch itself is fine
    assert bool(torch.isfinite(grad).all()) and bool(grad.ne(0).any())


@pytest.mark.parametrize(("loss", "path"), [p for p in _paths() if p.values[1] != "compiled"])
def test_validation_names_the_non_finite_input(loss, path):
    """validate=True: a ValueError naming the input (hidden_states for fused_linear's log-probs)."""
    for name in _inputs(loss):
        named = "hidden_states" if path == "fused_linear" and name == "log_probs" else name
        for kind in KINDS:
            with pytest.raises(ValueError, match=rf"^{named}: expected finite values at valid \(mask=True\) positions"):
                _run(loss, path, _poisoned(name, kind, path), validate=True)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_is_not_counted(kind):
    """The same values at a masked position of every (B, T) input: the loss and gradient of
    the clean batch, bit for bit, and nonfinite_tokens 0 (every path of the padding property
    test in test_robustness.py; here the metric and the gradient with the rule's term)."""
    tensors = _batch()
    for name in ("log_probs", "old_log_probs", "ref_log_probs", "rollout_is_weights"):
        tensors[name] = tensors[name].clone()
        tensors[name][2, 4] = kind
    for loss in ("gmpo", "grpo", "gpg"):
        for path in [impl for impl in get_loss(loss).impls if impl in ("eager", "torch")] or ["registry"]:
            loss_value, metrics, grad = _run(loss, path, tensors, validate=False)
            clean, _, clean_grad = _run(loss, path, _batch(), validate=False)
            assert metrics["nonfinite_tokens"].item() == 0.0
            assert torch.equal(loss_value, clean) and torch.equal(grad, clean_grad), (loss, path)


def test_a_finite_batch_is_unchanged_by_the_rule():
    """The rule adds -0 (x + -0 = x for every float): with the tail's term forced on (no input
    covered by a pass), the fused paths' loss and gradient are bit for bit their own."""
    from gmpo_plugins.core import tail

    tensors = _batch()
    finish = tail.finish

    def uncovered(*args, **kwargs):
        return finish(*args, **{**kwargs, "covered": ()})

    for loss in ("gmpo", "grpo"):
        plain = _run(loss, "torch", tensors, validate=False)
        with pytest.MonkeyPatch.context() as patch:
            for module in ("gmpo_plugins.core.kernels.sequence", "gmpo_plugins.core.kernels.token"):
                patch.setattr(f"{module}.finish", uncovered)
            forced = _run(loss, "torch", tensors, validate=False)
        assert torch.equal(plain[0], forced[0]) and torch.equal(plain[2], forced[2]), loss
        assert torch.equal(plain[2].view(torch.int32), forced[2].view(torch.int32)), loss  # the sign of 0 too


@pytest.fixture
def nonfinite_env(monkeypatch):
    """Sets GMPO_PLUGINS_NONFINITE for one test (read once per process: the cache is cleared)."""

    def set_mode(value: str) -> None:
        monkeypatch.setenv(validation.NONFINITE_ENV, value)
        validation._NONFINITE_MODE.clear()

    yield set_mode
    validation._NONFINITE_MODE.clear()


@pytest.mark.parametrize("name", INPUTS)
def test_raise_mode_names_the_input_row_and_column(nonfinite_env, name):
    """GMPO_PLUGINS_NONFINITE=raise: a ValueError at the first non-finite valid position, the
    input named with its row and column (a (B,) input: its row's first column), even with
    validate=False; padding is not a position."""
    nonfinite_env("raise")
    tensors = _poisoned(name, math.inf, "eager")
    tensors["log_probs"][2, 4] = math.nan  # padding: never reported
    column = 0 if name == "advantages" else 1
    with pytest.raises(ValueError, match=rf"^{name}: inf at row 0, column {column}, a valid \(mask=True\) position"):
        _run("gmpo", "torch", tensors, validate=False)
    tensors = _batch()
    tensors["old_log_probs"][1, 3] = -math.inf
    tensors["ref_log_probs"][1, 2] = math.nan  # earlier in row 1: reported first
    with pytest.raises(ValueError, match=r"^ref_log_probs: nan at row 1, column 2"):
        _run("grpo", "eager", tensors, validate=False)


def test_raise_mode_passes_finite_inputs_and_refuses_a_bad_value(nonfinite_env):
    nonfinite_env("raise")
    loss_value, _, _ = _run("gmpo", "torch", _batch(), validate=False)
    assert bool(torch.isfinite(loss_value))
    nonfinite_env("stop")
    with pytest.raises(ValueError, match=r"^GMPO_PLUGINS_NONFINITE: expected one of \['propagate', 'raise'\]"):
        _run("gmpo", "torch", _batch(), validate=False)
