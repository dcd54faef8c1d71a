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
    documented = {"k1": -d, "k2": d**2 / 2, "k3": math.expm1(clamped) - clamped, "abs": abs(d)}[estimator.rstrip("+")]
    # d/dlog_prob of the documented formula (d' = d inside the clamp, constant outside); the
    # straight-through forms take k2's gradient, -d
    slopes = {"k1": 1.0, "k2": -d, "k3": -math.expm1(clamped) if abs(d) < 20 else 0.0, "abs": -math.copysign(1.0, d)}
    slope = -d if estimator.endswith("+") else slopes[estimator]
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


def test_the_loss_table_is_the_registry_s():
    """docs/losses.md's table of every loss is the output of `gmpo-plugins list --markdown`."""
    from gmpo_plugins.cli.list_cmd import loss_rows, markdown_table

    table = markdown_table(loss_rows())
    page_has(tuple(table.splitlines()))
    assert "Generated by `gmpo-plugins list --markdown`" in LOSSES_PAGE.read_text(encoding="utf-8")


def _line(name: str) -> str:
    """The page's formula line of a per-token loss (the line that starts with its name)."""
    lines = [
        line
        for line in LOSSES_PAGE.read_text(encoding="utf-8").splitlines()
        if line.startswith("    ") and line.split()[:3] == [name, "l_t", "="]
    ]
    assert len(lines) == 1, f"docs/losses.md has no single formula line for {name}"
    return lines[0]


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


# One token, log pi = lp, log pi_old = old, advantage a; each formula transcribed from the page
# with the page's names (rho = exp(r), p, q the probabilities). Cases where another reading
# (no stop-gradient, a lower clip, the wrong tau, the sum vs the mean) gives another value.
PER_TOKEN_CASES = {
    # rho = 6 > cap 5: l = -5 * a * lp; without the cap -6 a lp
    "cispo": (
        "l_t = -sg(clamp(rho_t, 1 - eps_low, 1 + eps_high)) * A_t * log pi_t",
        (-0.5, -0.5 - math.log(6), 2.0, {}),
        lambda lp, old, a, h: -min(math.exp(lp - old), 1 + 4.0) * a * lp,
    ),
    # A < 0: tau_neg = 1.05 (tau_pos would give another value)
    "sapo": (
        "l_t = -sigmoid(tau_t * (rho_t - 1)) * 4 / tau_t * A_t",
        (-1.0, -1.7, -1.0, {}),
        lambda lp, old, a, h: -sigmoid(1.05 * (math.exp(lp - old) - 1)) * 4 / 1.05 * a,
    ),
    "gpg": ("l_t = -A_t * log pi_t", (-1.3, -1.0, 0.7, {}), lambda lp, old, a, h: -a * lp),
    "dro": (
        "l_t = -(A_t * log pi_t - dro_beta / 2 * r_t^2)",
        (-1.0, -1.5, 2.0, {"dro_beta": 0.3}),
        lambda lp, old, a, h: -(a * lp - 0.3 / 2 * (lp - old) ** 2),
    ),
    # p - q = 0.1 <= delta_high 0.15: kept; l = -a (p / q) lp
    "dppo_tv": (
        "l_t = -A_t * sg(min(rho_t, ratio_cap)) * log pi_t * M_t",
        (math.log(0.3), math.log(0.2), 1.0, {"ratio_cap": 1.2}),
        lambda lp, old, a, h: -a * min(math.exp(lp - old), 1.2) * lp,
    ),
    # one token: k = 1, S = {t}: -a rho + coef |r|
    "kl_cov": (
        "l_t = -A_t rho_t + ppo_kl_coef * |r_t| * [t in S]",
        (-1.0, -1.3, 1.0, {"ppo_kl_coef": 0.5}),
        lambda lp, old, a, h: -a * math.exp(lp - old) + 0.5 * abs(lp - old),
    ),
    # one token: s = rho, unclipped within eps 0.5; |o| = 1
    "luspo": (
        "l_t = max(-A_i s_i, -A_i clamp(s_i, 1 - eps_low, 1 + eps_high)),  s_i = exp(mean_t r_t)",
        (-1.0, -1.2, 1.0, {"eps_low": 0.5, "eps_high": 0.5}),
        lambda lp, old, a, h: -a * math.exp(lp - old),
    ),
    "vespo": (
        "l_t = -sg(phi_i) * A_i * log pi_t,  phi_i = exp(lam + k * lw_i - lam * exp(lw_i))",
        (-1.0, -1.3, 1.0, {}),
        lambda lp, old, a, h: -math.exp(3 + 2 * (lp - old) - 3 * math.exp(lp - old)) * a * lp,
    ),
    # rho = e^0.1 = 1.105 inside (0.8, 1.2): -rho a lp; e^0.3 = 1.35 would be zeroed
    "rollout_is": (
        "l_t = -sg(rho_t * [1 - eps_low < rho_t < 1 + eps_high]) * A_t * log pi_t",
        (-1.0, -1.1, 2.0, {}),
        lambda lp, old, a, h: -math.exp(lp - old) * a * lp,
    ),
    "importance_sampling": ("l_t = -rho_t * A_t", (-1.0, -1.4, 0.5, {}), lambda lp, old, a, h: -math.exp(lp - old) * a),
}


@pytest.mark.parametrize("name", sorted(PER_TOKEN_CASES))
def test_per_token_formulas_as_documented(name):
    words, (lp, old, a, hparams), documented = PER_TOKEN_CASES[name]
    assert words in _line(name), _line(name)
    inputs = LossInputs(
        torch.tensor([[lp]], dtype=torch.float64, requires_grad=True),
        torch.tensor([[old]], dtype=torch.float64),
        torch.tensor([a], dtype=torch.float64),
        torch.tensor([[True]]),
    )
    value = get_loss(name)(inputs, **hparams).loss.item()
    assert value == pytest.approx(documented(lp, old, a, hparams), rel=1e-12)


def test_clip_cov_formula_as_documented():
    """Two tokens: A = [2, -2], log pi = [-1, -3]: C = [2, 2] in the band (1, 5), ratios 1 (no
    PPO clip); k = max(floor(0.5 * 2), 1) = 1: S = {t0} (the tie to the lower index); the page's
    l_t = [0, -(-2) * 1] = [0, 2], token-mean 1."""
    assert "l_t = max(-A_t rho_t, -A_t clamp(rho_t, 1 - eps_low, 1 + eps_high)) * [t not in S]" in _line("clip_cov")
    log_probs = torch.tensor([[-1.0, -3.0]], dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(
        log_probs, log_probs.detach(), torch.tensor([[2.0, -2.0]], dtype=torch.float64), torch.ones(1, 2, dtype=bool)
    )
    assert get_loss("clip_cov")(inputs, clip_cov_ratio=0.5).loss.item() == pytest.approx(1.0, rel=1e-12)


def test_dppo_kl_keeps_as_documented():
    """q = 0.01, p = 0.15, A = 1: D = 0.01 ln(1/15) + 0.99 ln(0.99 / 0.85) = 0.12387 > 0.05 and
    p > q: dropped (loss 0); dppo_tv keeps it (p - q = 0.14 <= 0.15)."""
    page_has(("`dppo_kl` keeps a token where `D_t <= delta_high or p_t <= q_t` (A_t > 0) or `D_t <= delta_low",))
    q, p = 0.01, 0.15
    d = q * math.log(q / p) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))
    assert d == pytest.approx(0.12387, abs=1e-5)
    inputs = LossInputs(
        torch.tensor([[math.log(p)]], dtype=torch.float64, requires_grad=True),
        torch.tensor([[math.log(q)]], dtype=torch.float64),
        torch.tensor([1.0], dtype=torch.float64),
        torch.tensor([[True]]),
    )
    assert get_loss("dppo_kl")(inputs).loss.item() == 0.0
    assert get_loss("dppo_tv")(inputs).loss.item() == pytest.approx(-15 * math.log(p), rel=1e-12)


@pytest.mark.parametrize(
    ("reduction", "expected"),
    # S_0 = 1 + 2 = 3 (2 tokens), S_1 = -2 (1 token), N = 2, M = 3, D = 1
    [("token-sum", 1.0), ("seq-mean-token-sum", 0.5), ("token-mean", 1 / 3), ("seq-mean-token-mean", -0.25)],
)
def test_token_reductions_as_documented(reduction, expected):
    page_has(
        (
            "    token-mean               sum_i S_i / M * D",
            "    seq-mean-token-mean      sum_i S_i / |o_i| / N * D",
            "    seq-mean-token-sum-norm  sum_i S_i / norm_length / N * D",
            "    token-sum                sum_i S_i * D",
            "    seq-mean-token-sum       sum_i S_i / N * D",
        )
    )
    log_probs = torch.tensor([[-1.0, -2.0], [-4.0, 0.0]], dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(
        log_probs, log_probs.detach(), torch.tensor([1.0, -0.5], dtype=torch.float64),
        torch.tensor([[True, True], [True, False]]),
    )  # fmt: skip
    assert get_loss("gpg")(inputs, reduction=reduction).loss.item() == pytest.approx(expected, rel=1e-12)
