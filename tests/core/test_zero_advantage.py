"""The sign convention at A = 0, for every GMPO variant and every implementation.

A sequence with A_i = 0 is clipped on neither side and counted in neither clip fraction;
its policy term -A_i * w_i is 0 and its tokens get zero gradient. The authors' code takes
the positive branch there (``sgn = -1 if A >= 0``: min(r_t, eps_high)) and TRL's
GMPOTrainer the negative one (``A > 0`` else max(r_t, c_t)); the loss and the gradient
are the same 0 under all three, so only the clip counts could differ (docs/losses.md).
"""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.core.kernels.dispatch import triton_importable, triton_interpreter

TRITON_RUNS = triton_importable() and (torch.cuda.is_available() or triton_interpreter())
needs_triton = pytest.mark.skipif(
    not TRITON_RUNS, reason="triton not installed, or neither CUDA nor TRITON_INTERPRET=1"
)
IMPLS = ["eager", "torch", pytest.param("triton", marks=needs_triton)]
GMPO_FAMILY = ("gmpo", "gmpo_noclip", "gmpo_seqclip", "gmpo_nonorm")

# Row 0: A = 0, r = [0.6, -0.6, 25] (25 is beyond the guard R = 20): outside the band on both
# sides. Row 1: A = 1, r = [0.2, 0.6] and one padding token. N = 2 sequences, 5 valid tokens.
# Row 1 per variant (eps 0.4 both): loss = -w_1 / N; the gradient of row 1's unclipped tokens
# is -A w_1 / |o_1| / N (gmpo_nonorm: -A w_1 / N); clip_frac_high over the 5 valid tokens.
#   gmpo          l = [0.2, 0.4], s = 0.6 / 2 = 0.3, w = e^0.3; token 2 clipped: 1/5
#   gmpo_noclip   s = 0.8 / 2 = 0.4, w = e^0.4; nothing clipped
#   gmpo_seqclip  S = 0.8 -> 0.4, s = 0.4 / 2 = 0.2, w = e^0.2; the whole row clipped: 2/5
#   gmpo_nonorm   l = [0.2, 0.4], s = 0.6, w = e^0.6; token 2 clipped: 1/5
EXPECTED = {
    "gmpo": (math.exp(0.3), [-math.exp(0.3) / 4, 0.0], 1 / 5),
    "gmpo_noclip": (math.exp(0.4), [-math.exp(0.4) / 4, -math.exp(0.4) / 4], 0.0),
    "gmpo_seqclip": (math.exp(0.2), [0.0, 0.0], 2 / 5),
    "gmpo_nonorm": (math.exp(0.6), [-math.exp(0.6) / 2, 0.0], 1 / 5),
}


def zero_and_positive(device: str) -> LossInputs:
    r = torch.tensor([[0.6, -0.6, 25.0], [0.2, 0.6, 0.0]], dtype=torch.float32, device=device)
    log_probs = torch.zeros_like(r, requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, True, False]], device=device)
    return LossInputs(log_probs, -r, torch.tensor([0.0, 1.0], device=device), mask)


def call(name: str, inputs: LossInputs, impl: str, **overrides):
    """The loss through ``impl`` (``LossSpec.fn`` with the spec's defaults), one micro-batch."""
    spec = get_loss(name)
    return spec.fn(inputs, BatchInfo(), impl=impl, **{**spec.defaults, **overrides})


def device_for(impl: str) -> str:
    return "cuda" if impl == "triton" and torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", GMPO_FAMILY)
def test_zero_advantage_row_is_clipped_on_neither_side(name, impl):
    inputs = zero_and_positive(device_for(impl))
    out = call(name, inputs, impl)
    out.loss.backward()
    weight, row_grad, clip_high = EXPECTED[name]
    assert out.loss.item() == pytest.approx(-weight / 2, rel=1e-6)
    grad = inputs.log_probs.grad.cpu()
    assert torch.count_nonzero(grad[0]) == 0  # A = 0: no gradient, whatever the branch
    assert grad[1, :2].tolist() == pytest.approx(row_grad, rel=1e-6)
    assert grad[1, 2].item() == 0.0  # padding
    # row 0's tokens outside the band (0.6, -0.6, 25) count on neither side; the authors'
    # positive branch would count 0.6 and 25 above the band (4/5 for gmpo instead of 1/5)
    assert out.metrics["clip_frac_high"].item() == pytest.approx(clip_high, rel=1e-6)
    assert out.metrics["clip_frac_low"].item() == 0.0


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", GMPO_FAMILY)
def test_zero_advantage_keeps_only_the_kl_term(name, impl):
    # One row, A = 0, r = [0.6, -0.6]; ref - new = ln 2 on both tokens: k3 = e^ln2 - ln2 - 1
    # = 1 - ln 2 = 0.306853 per token, mean 0.306853; beta 0.5 -> loss 0.153426, policy part 0.
    # The gradient is the KL term's alone: d k3 / d new = 1 - e^(ref - new) = -1 per token,
    # times beta / |o| = 0.25 -> -0.25, the same for every variant.
    device = device_for(impl)
    log_probs = torch.zeros(1, 2, dtype=torch.float32, device=device, requires_grad=True)
    old = -torch.tensor([[0.6, -0.6]], device=device)
    inputs = LossInputs(
        log_probs, old, torch.zeros(1, device=device), torch.ones(1, 2, dtype=torch.bool, device=device)
    )
    inputs.ref_log_probs = torch.full((1, 2), math.log(2), device=device)
    out = call(name, inputs, impl, kl_beta=0.5)
    out.loss.backward()
    assert out.metrics["policy_loss"].item() == 0.0
    assert out.loss.item() == pytest.approx(0.5 * (1 - math.log(2)), rel=1e-6)
    assert log_probs.grad.cpu()[0].tolist() == pytest.approx([-0.25, -0.25], rel=1e-6)
