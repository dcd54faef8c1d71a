"""The fused paths (``gmpo_plugins.core.kernels``) against the eager formulation.

The eager loss (``impl="eager"``) is the oracle: fused and eager agree on loss, every
metric and the gradient to 1e-6 relative in float32 (1e-12 in float64) on
hypothesis-generated inputs, extreme log ratios (+-1e4), empty rows and zero advantages
included. The Triton backend is checked the same way where triton is installed and
either CUDA or its CPU interpreter (TRITON_INTERPRET=1, the ``kernels`` nox session) is
available; elsewhere those tests skip.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.core.kernels import RowSums, clipped_row_sums, rowsum_torch, select_backend, token
from gmpo_plugins.core.kernels.dispatch import triton_importable, triton_interpreter

from ..registry_names import builtin_losses

SEQUENCE_LOSSES = builtin_losses(sequence_level=True, fused=True)
# decoupled_ppo and m2po run grpo's kernel (``clipped_ratio_loss``) on inputs that need
# rollout log-probs: the kernel is compared here through grpo, dapo and dr_grpo
TOKEN_LOSSES = [name for name in builtin_losses(sequence_level=False, fused=True) if not get_loss(name).requires]
FUSED_LOSSES = SEQUENCE_LOSSES + TOKEN_LOSSES
RTOL = {torch.float64: 1e-12, torch.float32: 1e-6, torch.bfloat16: 1e-6, torch.float16: 1e-6}

TRITON_RUNS = triton_importable() and (torch.cuda.is_available() or triton_interpreter())
needs_triton = pytest.mark.skipif(
    not TRITON_RUNS, reason="triton not installed, or neither CUDA nor TRITON_INTERPRET=1"
)
TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# ---------------------------------------------------------------------------- inputs


@st.composite
def cases(draw, max_batch: int = 6, max_length: int = 40, dtypes=(torch.float32, torch.float64)):
    """A micro-batch and hyper-parameters: log ratios at several scales with some tokens
    at +-1e4, empty rows, zero advantages, (B,) or row-constant (B, T) advantages,
    optional rollout IS weights, reference policy and global counts."""
    batch_size = draw(st.integers(1, max_batch))
    length = draw(st.integers(1, max_length))
    dtype = draw(st.sampled_from(dtypes))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scale = draw(st.sampled_from([1e-3, 0.1, 0.5, 3.0, 30.0]))
    extreme = draw(st.sampled_from([0.0, 0.1, 0.5]))
    old = -torch.rand(batch_size, length, generator=g, dtype=torch.float64) * 5
    log_ratio = scale * torch.randn(batch_size, length, generator=g, dtype=torch.float64)
    far = torch.rand(batch_size, length, generator=g, dtype=torch.float64) < extreme
    signs = torch.where(torch.rand(batch_size, length, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    log_ratio = torch.where(far, signs * 1e4, log_ratio)
    density = draw(st.sampled_from([0.0, 0.3, 0.8, 1.0]))
    mask = torch.rand(batch_size, length, generator=g) < density
    empty = draw(st.lists(st.integers(0, batch_size - 1), max_size=2))
    mask[empty] = False
    kind = draw(st.sampled_from(["mixed", "zero", "positive", "negative"]))
    advantages = torch.randn(batch_size, generator=g, dtype=torch.float64)
    advantages = {
        "mixed": advantages,
        "zero": advantages * 0,
        "positive": advantages.abs() + 0.1,
        "negative": -advantages.abs() - 0.1,
    }[kind]
    if kind == "mixed":
        advantages[torch.rand(batch_size, generator=g) < 0.3] = 0.0
    if draw(st.booleans()):
        advantages = advantages[:, None].expand(batch_size, length).contiguous()
    weights = draw(st.sampled_from([None, "seq", "token"]))
    rho = None
    if weights is not None:
        shape = (batch_size,) if weights == "seq" else (batch_size, length)
        rho = torch.rand(shape, generator=g, dtype=torch.float64) * 2
    ref = None
    hparams = {}
    if draw(st.booleans()):
        ref = old + 0.3 * torch.randn(batch_size, length, generator=g, dtype=torch.float64)
        hparams["kl_beta"] = draw(st.sampled_from([0.0, 0.05]))
    hparams["log_ratio_bound"] = draw(st.sampled_from([20.0, 0.3, 60.0]))
    eps = draw(st.sampled_from([(0.4, 0.4), (0.2, 0.28), (0.05, 50.0)]))
    batch = draw(
        st.sampled_from(
            [
                BatchInfo(),
                BatchInfo(dp_size=2, global_batch_size=3 * batch_size, global_num_tokens=5 * batch_size * length),
            ]
        )
    )
    hparams["reduction"] = draw(st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]))
    hparams["dual_clip"] = draw(st.sampled_from([None, 3.0]))
    hparams["norm_length"] = draw(st.sampled_from([1024, 7]))
    inputs = LossInputs(
        log_probs=(old + log_ratio).to(dtype),
        old_log_probs=old.to(dtype),
        advantages=advantages.to(dtype),
        mask=mask,
        ref_log_probs=None if ref is None else ref.to(dtype),
        rollout_is_weights=None if rho is None else rho.to(dtype),
    )
    return inputs, batch, hparams, eps


def _params(name: str, hparams: dict, eps: tuple[float, float]) -> dict:
    spec = get_loss(name)
    params = {**spec.defaults, **{k: v for k, v in hparams.items() if k in spec.defaults}}
    if "eps_low" in spec.defaults:
        low, high = (eps[0] / 1000, eps[1] / 1000) if name == "gspo" else eps
        params.update(eps_low=low, eps_high=high)
    return params


def run(name: str, inputs: LossInputs, batch: BatchInfo, params: dict, impl: str, device: str = "cpu"):
    """Loss, metrics and gradient of one call with ``impl`` (inputs detached, strides kept)."""

    def move(t):
        return None if t is None else t.detach().to(device)

    log_probs = move(inputs.log_probs).requires_grad_()
    moved = LossInputs(
        log_probs,
        move(inputs.old_log_probs),
        move(inputs.advantages),
        move(inputs.mask),
        move(inputs.ref_log_probs),
        move(inputs.rollout_is_weights),
    )
    out = get_loss(name).fn(moved, batch, impl=impl, **params)
    out.loss.backward()
    return out, log_probs.grad


def assert_agree(name, inputs, batch, params, impl, device="cpu", rtol=None):
    """Fused ``impl`` vs eager: |fused - eager| <= rtol * (|eager| + magnitude), where the
    magnitude of a sum is that of its terms (cancellation makes plain relative error of
    a near-zero sum meaningless): the mean |r| for ppo_kl, the loss with |A| for the loss,
    and for a gradient with a KL term |policy-term gradient| + |KL-term gradient| per token.

    A fused path may sum a row in another order than the eager loss (the Triton kernel
    always; the torch blocks when the inputs are not row-contiguous), so s_i = mean_t l_t
    differs by rounding, about rtol * mean_t |l_t| in absolute terms, which exp turns into
    that *relative* error of w_i: the tolerance of w-derived values (loss, gradient,
    seq_weight_*) is scaled by kappa = 1 + max_i mean_t |r_t| (the conditioning of
    exp(mean); max_i sum_t |r_t| for gmpo_nonorm, whose s_i is the sum); for contiguous inputs
    the torch path is in practice bit-identical."""
    dtype = inputs.log_probs.dtype
    rtol = RTOL[dtype] if rtol is None else rtol
    eager, grad_eager = run(name, inputs, batch, params, "eager")
    fused, grad_fused = run(name, inputs, batch, params, impl, device)
    abs_inputs = LossInputs(
        inputs.log_probs,
        inputs.old_log_probs,
        inputs.advantages.abs(),
        inputs.mask,
        inputs.ref_log_probs,
        inputs.rollout_is_weights,
    )
    loss_scale = run(name, abs_inputs, batch, params, "eager")[0].loss.abs().item()
    r_all = (inputs.log_probs.double() - inputs.old_log_probs.double()).where(inputs.mask, 0.0)
    r = r_all[inputs.mask]
    kl_scale = r.abs().mean().item() if r.numel() else 0.0
    count = inputs.mask.sum(-1).clamp_min(1)
    bound = params["log_ratio_bound"]
    # gmpo_nonorm's s_i is the row's sum, not its mean: the rounding of the sum conditions exp(s_i)
    per_row = torch.ones_like(count) if name == "gmpo_nonorm" else count
    kappa = 1.0 + (r_all.clamp(-bound, bound).abs().sum(-1) / per_row).max().item()
    kappa_raw = 1.0 + (r_all.abs().sum(-1) / per_row).max().item()

    def close(label, got, want, magnitude=0.0, scale=1.0):
        got, want = got.detach().cpu().double(), want.detach().double()
        same = (got == want) | (torch.isnan(got) & torch.isnan(want))
        diff = torch.where(same, 0.0, (got - want).abs())
        bound = rtol * scale * (want.abs() + magnitude) + 1e-300
        assert bool((diff <= bound).all()), f"{name}/{impl} {label}: fused {got} eager {want} (rtol {rtol} x {scale})"

    assert fused.loss.dtype == eager.loss.dtype
    close("loss", fused.loss, eager.loss, loss_scale, kappa)
    assert sorted(fused.metrics) == sorted(eager.metrics)
    for key, value in eager.metrics.items():
        assert fused.metrics[key].dtype == value.dtype and not fused.metrics[key].requires_grad
        magnitude = {"ppo_kl": kl_scale, "kl": kl_scale, "policy_loss": loss_scale}.get(key, 0.0)
        scale = kappa if key == "policy_loss" else kappa_raw if key.startswith("seq_weight") else 1.0
        close(key, fused.metrics[key], value, magnitude, scale)
    assert grad_fused.dtype == grad_eager.dtype == dtype
    assert torch.equal(grad_fused.cpu() == 0, grad_eager == 0), f"{name}/{impl}: different zero-gradient tokens"
    grad_magnitude: torch.Tensor | float = 0.0
    if params.get("kl_beta") and inputs.ref_log_probs is not None:
        # a token's gradient is the policy term plus beta * the KL term, which can cancel
        grad_policy = run(name, inputs, batch, {**params, "kl_beta": 0.0}, "eager")[1].double()
        grad_magnitude = grad_policy.abs() + (grad_eager.double() - grad_policy).abs()
    close("grad", grad_fused, grad_eager, grad_magnitude, kappa)


# ---------------------------------------------------------------------------- torch backend


@pytest.mark.parametrize("name", FUSED_LOSSES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_fused_matches_eager(name, case):
    inputs, batch, hparams, eps = case
    assert_agree(name, inputs, batch, _params(name, hparams, eps), "torch")


@pytest.mark.parametrize("name", FUSED_LOSSES)
def test_registry_path_is_fused_and_matches(name, monkeypatch):
    """get_loss(name)(...) goes through the fused forward (auto) and equals the oracle."""
    calls = []
    if name in SEQUENCE_LOSSES:
        original = rowsum_torch.forward

        def spy(*args):
            calls.append(args[0].shape)
            return original(*args)

        monkeypatch.setattr(rowsum_torch, "forward", spy)
    else:
        original = token._TokenRowSums.forward

        def spy(ctx, *args):
            calls.append(args[0].shape)
            return original(ctx, *args)

        monkeypatch.setattr(token._TokenRowSums, "forward", staticmethod(spy))
    g = torch.Generator().manual_seed(1)
    log_probs = torch.randn(4, 50, generator=g, requires_grad=True)
    old = log_probs.detach() + 0.3 * torch.randn(4, 50, generator=g)
    inputs = LossInputs(log_probs, old, torch.tensor([1.0, -2.0, 0.0, 0.5]), torch.rand(4, 50, generator=g) < 0.7)
    out = get_loss(name)(inputs, BatchInfo())
    assert calls == [(4, 50)]
    eager = get_loss(name).fn(inputs, BatchInfo(), impl="eager", **get_loss(name).defaults)
    torch.testing.assert_close(out.loss, eager.loss, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", FUSED_LOSSES)
def test_half_inputs_compute_in_float32(name, dtype):
    """Half inputs: loss and metrics in float32, gradient in the input dtype, equal to eager."""
    g = torch.Generator().manual_seed(2)
    old = -3 * torch.rand(5, 300, generator=g)
    log_probs = (old + 0.5 * torch.randn(5, 300, generator=g)).to(dtype)
    mask = torch.rand(5, 300, generator=g) < 0.8
    inputs = LossInputs(log_probs, old.to(dtype), torch.tensor([1.0, -1.0, 0.0, 2.0, -0.5]), mask)
    fused, grad = run(name, inputs, BatchInfo(), _params(name, {}, (0.4, 0.4)), "torch")
    assert fused.loss.dtype == torch.float32 and grad.dtype == dtype
    assert_agree(name, inputs, BatchInfo(), _params(name, {}, (0.4, 0.4)), "torch")


def test_hand_values_of_row_stats():
    """clipped_row_sums on a hand example (lo/hi per row, padding holding NaN)."""
    log_probs = torch.tensor([[0.5, -1.0, 2.0, float("nan")], [0.0, 0.0, 0.0, 0.0]], requires_grad=True)
    old = torch.zeros(2, 4)
    mask = torch.tensor([[True, True, True, False], [False, False, False, False]])
    lo, hi = torch.tensor([-0.4, -20.0]), torch.tensor([1.0, 20.0])
    stats = clipped_row_sums(log_probs, old, mask, lo, hi, impl="torch")
    assert isinstance(stats, RowSums)
    # row 0: r = 0.5, -1, 2 -> clamp to [-0.4, 1]: 0.5 - 0.4 + 1 = 1.1; 1 below, 1 above
    torch.testing.assert_close(stats.sum_clipped, torch.tensor([1.1, 0.0]))
    torch.testing.assert_close(stats.sum_raw, torch.tensor([1.5, 0.0]))
    assert stats.count.tolist() == [3.0, 0.0] and stats.below.tolist() == [1.0, 0.0]
    assert stats.above.tolist() == [1.0, 0.0]
    assert stats.raw_min.tolist() == [-1.0, math.inf] and stats.raw_max.tolist() == [2.0, -math.inf]
    (stats.sum_clipped * torch.tensor([3.0, 5.0])).sum().backward()
    assert log_probs.grad.tolist() == [[3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
@pytest.mark.parametrize("name", SEQUENCE_LOSSES)
def test_bounds_are_inclusive_like_clamp(name, impl):
    """Log ratios exactly on eps_high, -eps_low, +-R: eager's clamp passes the gradient
    there (and the token is not counted as clipped); the fused path must agree."""
    r = torch.tensor([[0.5, 0.25, -2.0, 0.125], [-0.5, -0.25, 2.0, 0.125], [2.0, -2.0, 0.5, -0.5]])
    old = torch.full_like(r, -1.0)
    inputs = LossInputs(old + r, old, torch.tensor([1.0, -1.0, 0.0]), torch.ones_like(r, dtype=torch.bool))
    params = _params(name, {"log_ratio_bound": 2.0}, (0.5, 0.5))
    assert_agree(name, inputs, BatchInfo(), params, impl, TRITON_DEVICE if impl == "triton" else "cpu")
    _, grad = run(name, inputs, BatchInfo(), params, impl, TRITON_DEVICE if impl == "triton" else "cpu")
    if name != "gspo":  # gspo's sequence ratio is far outside its 3e-4 band: no gradient
        assert bool((grad[:2] != 0).all())


def _next_ratio(r: float, up: bool) -> tuple[float, float]:
    """(r', exp(r')) in float32 with exp(r') the float32 neighbour of exp(r), above or below."""
    start = torch.exp(torch.tensor(r))
    target = torch.nextafter(start, torch.tensor(math.inf if up else -math.inf))
    x = torch.tensor(r)
    while torch.exp(x) != target:
        x = torch.nextafter(x, torch.tensor(math.inf if up else -math.inf))
    return x.item(), target.item()


def _tie_advantage(edge: float, beyond: float) -> float:
    """A float32 A > 0 whose -A * beyond and -A * edge round to the same float32."""
    edge_t, beyond_t = torch.tensor(edge), torch.tensor(beyond)
    for k in range(1, 1 << 14):
        a = torch.tensor(1.0 + k * 2.0**-12)
        if -a * edge_t == -a * beyond_t:
            return a.item()
    raise AssertionError("no tie found")


@pytest.mark.parametrize("dual_clip", [None, 3.0])
@pytest.mark.parametrize("name", TOKEN_LOSSES)
def test_token_band_edges_ties_and_bound(name, dual_clip):
    """Ratios exactly on 1 - eps_low and 1 + eps_high (clamp passes the gradient), one float32
    step outside them where -A * rho and -A * (band edge) round to the same float (a tie of
    torch.maximum: half the gradient), log ratios exactly on +-R and beyond, NaN/inf padding:
    the fused loss's saved derivative gives eager's gradient, zero pattern included."""
    hi_r, low_r = 0.25, -0.25
    high, low = torch.exp(torch.tensor(hi_r)).item(), torch.exp(torch.tensor(low_r)).item()
    above_r, above = _next_ratio(hi_r, up=True)
    below_r, below = _next_ratio(low_r, up=False)
    a_high, a_low = _tie_advantage(high, above), _tie_advantage(low, below)
    r = torch.tensor(
        [
            [hi_r, above_r, 0.5, 0.0, math.nan, math.inf],  # A > 0: edge, tie, clipped, inside
            [2.0, 2.5, -2.0, hi_r, 0.1, -math.inf],  # A < 0: r = R, beyond R, r = -R (clipped)
            [low_r, below_r, -0.5, 0.0, 0.0, 0.0],  # A > 0: edge, tie, unclipped below the band
        ]
    )
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    old = torch.zeros_like(r)  # log_probs - old = r exactly
    inputs = LossInputs(old + r, old, torch.tensor([a_high, -1.0, a_low]), mask)
    params = _params(name, {"log_ratio_bound": 2.0, "dual_clip": dual_clip}, (1.0 - low, high - 1.0))
    assert 1.0 + params["eps_high"] == high and 1.0 - params["eps_low"] == low
    assert_agree(name, inputs, BatchInfo(), params, "torch")
    _, grad = run(name, inputs, BatchInfo(), params, "torch")
    assert torch.equal(grad[~mask], torch.zeros(int((~mask).sum())))
    assert bool((grad[0, :2] != 0).all()) and grad[0, 2] == 0 and bool((grad[2, :3] != 0).all())
    torch.testing.assert_close(grad[0, 1], grad[0, 0] / 2 * above / high, rtol=1e-6, atol=0)  # half on a tie
    torch.testing.assert_close(grad[2, 1], grad[2, 0] / 2 * below / low, rtol=1e-6, atol=0)
    if dual_clip is None:
        assert grad[1, 0] != 0 and grad[1, 1] == 0 and grad[1, 2] == 0


@pytest.mark.parametrize("name", TOKEN_LOSSES)
@pytest.mark.parametrize("upstream", [math.inf, math.nan])
def test_token_padding_gradient_is_zero_for_a_non_finite_upstream_gradient(name, upstream):
    """An infinite or NaN dLoss/dS_i: padding stays exactly +0, as eager's where gives, and
    every token with a gradient in eager has the same non-finite one (a clipped valid token
    gets g_i * 0 = NaN here, eager's clamp/maximum backward gives it 0)."""
    g = torch.Generator().manual_seed(11)
    old = -torch.rand(3, 9, generator=g)
    log_probs = old + 0.4 * torch.randn(3, 9, generator=g)
    mask = torch.rand(3, 9, generator=g) < 0.6
    log_probs[~mask] = math.nan
    grads = []
    for impl in ("torch", "eager"):
        x = log_probs.clone().requires_grad_()
        inputs = LossInputs(x, old, torch.tensor([1.0, -1.0, 0.5]), mask)
        out = get_loss(name).fn(inputs, BatchInfo(), impl=impl, **get_loss(name).defaults)
        (grad,) = torch.autograd.grad(out.loss, x, torch.tensor(upstream))
        grads.append(grad)
    moved = grads[1] != 0
    torch.testing.assert_close(grads[0][moved], grads[1][moved], equal_nan=True)
    assert torch.equal(grads[0][~mask], torch.zeros(int((~mask).sum()))) and not torch.signbit(grads[0][~mask]).any()


def test_row_sums_gradcheck_float64():
    """Finite differences confirm d sum_clipped_i / d log_probs_t = active_t (away from the bounds)."""
    g = torch.Generator().manual_seed(3)
    log_probs = torch.randn(3, 7, generator=g, dtype=torch.float64)
    log_probs = (log_probs + 0.05 * torch.sign(log_probs)).requires_grad_()  # keep |r| away from 0.3
    old = torch.zeros(3, 7, dtype=torch.float64)
    mask = torch.rand(3, 7, generator=g) < 0.7
    lo, hi = torch.tensor([-0.3, -5.0, -0.3], dtype=torch.float64), torch.tensor([5.0, 0.3, 0.3], dtype=torch.float64)
    fn = lambda x: clipped_row_sums(x, old, mask, lo, hi, impl="torch").sum_clipped  # noqa: E731
    assert torch.autograd.gradcheck(fn, (log_probs,), eps=1e-6, atol=1e-8)


def test_blocks_cover_all_rows(monkeypatch):
    """Many small blocks (one row each) give the same statistics as one block."""
    g = torch.Generator().manual_seed(4)
    log_probs, old = torch.randn(9, 33, generator=g), torch.randn(9, 33, generator=g)
    mask = torch.rand(9, 33, generator=g) < 0.5
    lo, hi = -torch.rand(9, generator=g), torch.rand(9, generator=g)
    whole = clipped_row_sums(log_probs, old, mask, lo, hi, impl="torch")
    monkeypatch.setattr(rowsum_torch, "BLOCK_ELEMENTS", 1)
    split = clipped_row_sums(log_probs, old, mask, lo, hi, impl="torch")
    for a, b in zip(whole, split, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["grpo", "gmpo"])
def test_loss_independent_of_blocking(name, monkeypatch):
    """One row per block (forward and backward) gives the same loss and gradient."""
    g = torch.Generator().manual_seed(7)
    old = -torch.rand(6, 40, generator=g)
    inputs = LossInputs(
        old + 0.3 * torch.randn(6, 40, generator=g),
        old,
        torch.randn(6, generator=g),
        torch.rand(6, 40, generator=g) < 0.8,
        rollout_is_weights=torch.rand(6, 40, generator=g),
    )
    params = _params(name, {}, (0.2, 0.28))
    whole, grad_whole = run(name, inputs, BatchInfo(), params, "torch")
    monkeypatch.setattr(rowsum_torch, "BLOCK_ELEMENTS", 1)
    split, grad_split = run(name, inputs, BatchInfo(), params, "torch")
    assert torch.equal(whole.loss, split.loss) and torch.equal(grad_whole, grad_split)


def _saved_float_bt(name: str, impl: str) -> list[tuple]:
    """(dtype, shape) of every floating (B, T)-sized tensor autograd saves for backward,
    other than the input tensors themselves (saving those costs no memory)."""
    g = torch.Generator().manual_seed(5)
    log_probs = torch.randn(8, 64, generator=g, requires_grad=True)
    inputs = LossInputs(
        log_probs, log_probs.detach() + 0.1, torch.randn(8, generator=g), torch.rand(8, 64, generator=g) < 0.9
    )
    given = {t.data_ptr() for t in (inputs.log_probs, inputs.old_log_probs)}
    saved = []

    def pack(t):
        if t.dtype.is_floating_point and t.numel() >= 8 * 64 and t.data_ptr() not in given:
            saved.append((t.dtype, tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        get_loss(name).fn(inputs, BatchInfo(), impl=impl, **get_loss(name).defaults)
    return saved


@pytest.mark.parametrize("name", FUSED_LOSSES)
def test_only_the_token_derivative_is_saved(name):
    """Sequence-level losses save nothing float of size (B, T) (a 1-byte mask); the token-level
    ones save one (B, T) tensor, their per-token derivative in float32 (4 bytes per token)."""
    assert _saved_float_bt(name, "torch") == ([(torch.float32, (8, 64))] if name in TOKEN_LOSSES else [])
    assert _saved_float_bt(name, "eager") != []  # the check does see the eager path's tensors


@pytest.mark.parametrize("name", TOKEN_LOSSES)
def test_no_token_derivative_without_autograd(name):
    """Under no_grad (metrics only) the token-level pass keeps no (B, T) derivative: it
    dispatches fewer operators than the same call with autograd on."""
    from gmpo_plugins.bench.ops import count_ops

    inputs = LossInputs(
        torch.randn(8, 64, requires_grad=True), torch.randn(8, 64), torch.randn(8), torch.ones(8, 64, dtype=torch.bool)
    )
    spec = get_loss(name)

    def call():
        return spec(inputs, validate=False)

    with_grad = count_ops(call).compute_ops
    with torch.no_grad():
        without = count_ops(call).compute_ops
        out = call()
    assert without < with_grad and not out.loss.requires_grad


def test_bad_impl_names_the_argument():
    inputs = LossInputs(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1), torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="impl must be one of"):
        get_loss("gmpo").fn(inputs, BatchInfo(), impl="fast", **get_loss("gmpo").defaults)


def test_auto_selects_torch_on_cpu():
    assert select_backend("auto", torch.zeros(1)) is rowsum_torch
    assert select_backend("auto", torch.zeros(1, dtype=torch.float64)) is rowsum_torch


@pytest.mark.skipif(TRITON_RUNS, reason="checks the error raised where triton cannot run")
def test_triton_unavailable_is_a_clear_error():
    with pytest.raises(ValueError, match="impl='triton'"):
        select_backend("triton", torch.zeros(1))


# ---------------------------------------------------------------------------- Triton backend


@needs_triton
@pytest.mark.parametrize("name", SEQUENCE_LOSSES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_batch=4, max_length=24, dtypes=(torch.float32,)))
def test_triton_matches_eager(name, case):
    inputs, batch, hparams, eps = case
    assert_agree(name, inputs, batch, _params(name, hparams, eps), "triton", TRITON_DEVICE)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["gmpo", "gspo"])
def test_triton_long_rows_and_half_inputs(name, dtype):
    """T larger than the kernels' block (several loop iterations), strided inputs, half dtypes."""
    g = torch.Generator().manual_seed(6)
    old = -3 * torch.rand(3, 2600, generator=g)
    wide = old + 0.4 * torch.randn(3, 2600, generator=g)
    log_probs = torch.cat([wide, wide], 1)[:, :2600].to(dtype)  # row stride 5200, unit stride along T
    mask = torch.rand(3, 2600, generator=g) < 0.9
    inputs = LossInputs(log_probs, old.to(dtype), torch.tensor([1.0, -1.0, 0.0]), mask)
    assert_agree(name, inputs, BatchInfo(), _params(name, {}, (0.4, 0.4)), "triton", TRITON_DEVICE)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", FUSED_LOSSES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_batch=5, max_length=300, dtypes=(torch.float32,)))
def test_cuda_registry_path_matches_eager(name, case):
    """The registry's path on CUDA tensors (impl="auto": Triton for the sequence-level
    losses where triton imports, the torch blocks for the token-level ones) vs eager on CPU."""
    inputs, batch, hparams, eps = case
    assert_agree(name, inputs, batch, _params(name, hparams, eps), "auto", "cuda")


@needs_triton
def test_triton_auto_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("auto selects Triton on CUDA tensors only")
    from gmpo_plugins.core.kernels import rowsum_triton

    assert select_backend("auto", torch.zeros(1, device="cuda")) is rowsum_triton


@pytest.mark.parametrize("name", FUSED_LOSSES)
def test_non_contiguous_inputs_and_no_grad(name):
    """Column-major log_probs, strided old_log_probs, a transposed mask: same as eager;
    under no_grad (metrics only) the fused path runs without building a graph."""
    g = torch.Generator().manual_seed(8)
    big = torch.randn(6, 80, generator=g)
    log_probs = big[:, ::2].t().contiguous().t()
    inputs = LossInputs(
        log_probs, big[:, 1::2], torch.randn(6, generator=g), (torch.rand(40, 6, generator=g) < 0.8).t()
    )
    assert not (inputs.log_probs.is_contiguous() or inputs.old_log_probs.is_contiguous() or inputs.mask.is_contiguous())
    assert_agree(name, inputs, BatchInfo(), _params(name, {}, (0.2, 0.28)), "torch")
    with torch.no_grad():
        out = get_loss(name)(LossInputs(log_probs.requires_grad_(), *list(vars(inputs).values())[1:]), BatchInfo())
    assert not out.loss.requires_grad and torch.isfinite(out.loss)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_backward_is_exact_select(dtype):
    """grad = coef_i on active tokens (rounded once to the gradient dtype), exactly +0 on
    the others even for an infinite or NaN coefficient (as autograd through where gives)."""
    active = torch.tensor([[True, False], [True, False], [False, True], [True, True]])
    coef = torch.tensor([math.inf, math.nan, -1.5, 1 / 3], dtype=torch.float64)
    grad = rowsum_torch.backward(active, coef, dtype)
    assert grad.dtype == dtype
    assert grad[0, 0] == math.inf and math.isnan(grad[1, 0]) and grad[2, 1] == -1.5
    assert torch.equal(grad[3], torch.full((2,), 1 / 3, dtype=torch.float64).to(dtype))
    inactive = grad[~active]
    assert torch.equal(inactive, torch.zeros_like(inactive)) and not torch.signbit(inactive).any()


@pytest.mark.parametrize("name", SEQUENCE_LOSSES)
def test_contiguous_float32_is_bit_identical(name):
    """For row-contiguous inputs the torch backend sums each row with the same torch
    reduction as the eager loss, so loss and gradient are equal bit for bit."""
    g = torch.Generator().manual_seed(9)
    old = -3 * torch.rand(12, 700, generator=g)
    inputs = LossInputs(
        old + 2 * torch.randn(12, 700, generator=g),
        old,
        torch.randn(12, generator=g),
        torch.rand(12, 700, generator=g) < 0.8,
    )
    params = _params(name, {}, (0.2, 0.28))
    eager, grad_eager = run(name, inputs, BatchInfo(), params, "eager")
    fused, grad_fused = run(name, inputs, BatchInfo(), params, "torch")
    assert torch.equal(fused.loss, eager.loss) and torch.equal(grad_fused, grad_eager)


@pytest.mark.parametrize("shape", [(0, 7), (4, 0)])
@pytest.mark.parametrize("impl", ["eager", "torch", pytest.param("triton", marks=needs_triton)])
@pytest.mark.parametrize("name", SEQUENCE_LOSSES + TOKEN_LOSSES)
def test_empty_micro_batch_every_impl(name, impl, shape):
    """B = 0 or T = 0: a zero loss on the graph, a zero gradient and zero metrics in every impl."""
    if impl == "triton" and name in TOKEN_LOSSES:
        pytest.skip("no Triton kernel for token-level losses")
    device = TRITON_DEVICE if impl == "triton" else "cpu"
    log_probs = torch.zeros(shape, device=device, requires_grad=True)
    inputs = LossInputs(
        log_probs,
        torch.zeros(shape, device=device),
        torch.zeros(shape[0], device=device),
        torch.zeros(shape, dtype=torch.bool, device=device),
    )
    spec = get_loss(name)
    out = spec.fn(inputs, BatchInfo(), impl=impl, **spec.defaults)
    (grad,) = torch.autograd.grad(out.loss, log_probs)
    assert out.loss.item() == 0.0 and grad.shape == shape and not grad.any()
    assert all(value.item() == 0.0 for value in out.metrics.values())
