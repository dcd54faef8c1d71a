"""The formulas of docs/losses.md, evaluated as written on hand cases, against the code.

Each case names the lines of the page it transcribes (they must be there verbatim, so the
page cannot change without this test) and evaluates them in Python on numbers where a
different reading (another order, another clamp) gives another value.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gmpo_plugins import LossInputs, get_loss
from gmpo_plugins.core.kl import KL_ESTIMATORS

LOSSES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "losses.md"
DUAL_CLIP_LINES = (
    "    p_t = max(-A_t rho_t, -A_t clamp(rho_t, 1 - eps_low, 1 + eps_high))",
    "    p_t = min(p_t, -A_t * dual_clip) where A_t < 0, when dual_clip is set",
    "    l_t = p_t * w_t",
)
KL_LINES = (
    "    k1 = -d",
    "    k2 = d^2 / 2",
    "    k3 = expm1(d') - d',  d' = clamp(d, -20, 20)",
)


def page_has(lines: tuple[str, ...]) -> None:
    text = LOSSES_PAGE.read_text(encoding="utf-8")
    assert "\n".join(lines) in text, f"docs/losses.md no longer says {lines}"


def one_token(log_ratio: float, advantage: float, **optional: torch.Tensor) -> LossInputs:
    log_probs = torch.tensor([[log_ratio]], dtype=torch.float64, requires_grad=True)
    return LossInputs(
        log_probs, torch.zeros(1, 1, dtype=torch.float64), torch.tensor([advantage], dtype=torch.float64),
        torch.tensor([[True]]), **optional,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize(("rho", "advantage", "weight"), [(5.0, -1.0, 0.5), (5.0, -1.0, 2.0), (0.5, 2.0, 0.25)])
def test_dual_clip_caps_before_the_is_weight(name, rho, advantage, weight):
    """A = -1, rho = 5, dual_clip = 3, w = 0.5: the page's order gives min(5, 3) * 0.5 = 1.5
    (the weight first would give min(2.5, 3) = 2.5); w = 2: 3 * 2 = 6 (against min(10, 3) = 3)."""
    page_has(DUAL_CLIP_LINES)
    eps_low, eps_high, dual_clip = 0.2, 0.2, 3.0
    p = max(-advantage * rho, -advantage * min(max(rho, 1 - eps_low), 1 + eps_high))
    p = min(p, -advantage * dual_clip) if advantage < 0 else p
    documented = p * weight
    inputs = one_token(math.log(rho), advantage, rollout_is_weights=torch.tensor([[weight]], dtype=torch.float64))
    hparams = {"eps_low": eps_low, "eps_high": eps_high, "dual_clip": dual_clip}
    if name == "dr_grpo":
        hparams["norm_length"] = 1  # sum_t l_t / 1 over one sequence: l_t itself
    for impl in get_loss(name).impls:
        out = get_loss(name)(inputs, impl=impl, **hparams)
        assert out.loss.item() == pytest.approx(documented, rel=1e-12), impl
    if (rho, advantage, weight) == (5.0, -1.0, 0.5):
        assert documented == 1.5


@pytest.mark.parametrize("d", [25.0, -25.0, 20.5, -3.0])
@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_kl_estimators_as_documented_beyond_the_clamp(estimator, d):
    """d = ref - new = +-25 (|d| > 20): k1 = -d and k2 = d^2 / 2 are not clamped, k3 is
    (d = 25: k1 = -25, k2 = 312.5, k3 = e^20 - 21 with zero gradient), for every loss path."""
    page_has(KL_LINES)
    clamped = min(max(d, -20.0), 20.0)
    documented = {"k1": -d, "k2": d**2 / 2, "k3": math.expm1(clamped) - clamped}[estimator]
    # d/dlog_prob of the documented formula (d' = d inside the clamp, constant outside)
    slope = {"k1": 1.0, "k2": -d, "k3": -math.expm1(clamped) if abs(d) < 20 else 0.0}[estimator]
    for name in ("gmpo", "grpo", "gspo"):
        for impl in get_loss(name).impls:
            if impl == "triton":
                continue
            inputs = one_token(0.0, 0.0, ref_log_probs=torch.tensor([[d]], dtype=torch.float64))
            out = get_loss(name)(inputs, kl_beta=1.0, kl_estimator=estimator, impl=impl)
            assert out.metrics["kl"].item() == pytest.approx(documented, rel=1e-12), (name, impl)
            assert out.loss.item() == pytest.approx(documented, rel=1e-12), (name, impl)  # A = 0: no policy term
            out.loss.backward()
            assert inputs.log_probs.grad.item() == pytest.approx(slope, rel=1e-12, abs=1e-300), (name, impl)


def test_k3_keeps_float32_precision_for_small_d():
    """k3 = expm1(d) - d ~ d^2 / 2 in float32 against float64 on the same float32 d. expm1
    is correct to about one ulp, and subtracting d then cancels the leading digit: relative
    error <= 4 eps / |d| + 4 eps (1.6e-4 at d = -3e-3, where exp(d) - d - 1 was 7.7e-3 off,
    the 1 and the e^d cancelling too)."""
    from gmpo_plugins.core.kl import kl_per_token

    d = torch.tensor([-3e-3, 3e-3, -1e-3, 1e-2, -0.1, 0.5, -1.0, 1e-4, -19.0], dtype=torch.float32)
    got = kl_per_token(torch.zeros_like(d), d, "k3").double()
    want = kl_per_token(torch.zeros_like(d, dtype=torch.float64), d.double(), "k3")
    eps = torch.finfo(torch.float32).eps
    relative = (got - want).abs() / want
    assert torch.all(relative <= 4 * eps / d.double().abs() + 4 * eps), relative
    assert relative[0] < 1e-4  # d = -3e-3
