"""The rollout correction (``core.correction``): hand values per mode, a float64 reference of
every mode written here token by token, the non-finite rule, split invariance, and the
zero-weight rule (one masked token of 1,000 never zeros its row)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.core.correction import CORRECTION_DEFAULTS, CORRECTION_METRIC_KEYS, RS_OPTIONS, SPLIT_DEPENDENT

from .batches import complete, random_batch

F64 = torch.float64


def _grad(name, inputs, batch=None, **hparams):
    out = get_loss(name)(inputs, batch, **hparams)
    (grad,) = torch.autograd.grad(out.loss, inputs.log_probs)
    return out, grad


def _inputs(log_probs, old, advantages, rollout=None, mask=None, weights=None):
    log_probs = torch.tensor(log_probs, dtype=F64).requires_grad_()
    old = torch.tensor(old, dtype=F64)
    return LossInputs(
        log_probs,
        old,
        torch.tensor(advantages, dtype=F64),
        torch.ones_like(old, dtype=torch.bool) if mask is None else torch.tensor(mask),
        rollout_is_weights=None if weights is None else torch.tensor(weights, dtype=F64),
        rollout_log_probs=None if rollout is None else torch.tensor(rollout, dtype=F64),
    )


# ---- the zero-weight rule: one masked token of 1,000 --------------------------------------------


@pytest.mark.parametrize("aggregation", ["geometric_mean", "arithmetic_mean", "per_token"])
@pytest.mark.parametrize("impl", ["eager", None])
def test_one_masked_token_of_a_thousand_leaves_its_row_training(aggregation, impl):
    """r = 0, A = 1, weights 1 but one 0: the token leaves the row, w_i = rho_i = 1 over the 999
    others, loss -1, each other token's gradient -1/999, the masked one's 0 (before: the geometric
    mean of the weights was 0 and the row trained nothing)."""
    weights = torch.ones(1, 1000, dtype=F64)
    weights[0, 500] = 0.0
    inputs = LossInputs(
        torch.zeros(1, 1000, dtype=F64, requires_grad=True),
        torch.zeros(1, 1000, dtype=F64),
        torch.ones(1, dtype=F64),
        torch.ones(1, 1000, dtype=torch.bool),
        rollout_is_weights=weights,
    )
    out, grad = _grad("gmpo", inputs, impl=impl, rollout_is_aggregation=aggregation)
    assert out.loss.item() == pytest.approx(-1.0, rel=1e-12)
    want = torch.full((1, 1000), -1.0 / 999, dtype=F64)
    want[0, 500] = 0.0
    assert torch.allclose(grad, want, rtol=1e-12, atol=0)


def test_the_same_row_masked_by_the_correction_trains():
    """The 1-in-1,000 row through the correction itself: IcePop band [0.5, 2], one token's rollout
    log-prob 3 below the old one (ratio e^3 = 20.1, out of band)."""
    rollout = torch.zeros(1, 1000, dtype=F64)
    rollout[0, 7] = -3.0
    inputs = LossInputs(
        torch.zeros(1, 1000, dtype=F64, requires_grad=True),
        torch.zeros(1, 1000, dtype=F64),
        torch.ones(1, dtype=F64),
        torch.ones(1, 1000, dtype=torch.bool),
        rollout_log_probs=rollout,
    )
    hp = {"rollout_is": "token", "rollout_is_mode": "mask", "rollout_is_threshold_low": 0.5}
    out, grad = _grad("gmpo", inputs, **hp)
    assert out.loss.item() == pytest.approx(-1.0, rel=1e-12)
    assert grad[0, 7].item() == 0.0 and grad[0, 0].item() == pytest.approx(-1.0 / 999, rel=1e-12)
    assert out.metrics["rollout_token_masked_frac"].item() == pytest.approx(1e-3)
    assert out.metrics["rollout_seq_masked_frac"].item() == 0.0


@pytest.mark.parametrize("name", ["gmpo", "gspo"])
def test_a_row_of_zero_weights_trains_nothing_and_stays_counted(name):
    """Row 0 all weights 0, row 1 weights 1, r = 0, A = 1: the local count stays 2, so the loss is
    (0 + L_1) / 2 = -0.5 (a dropped row would make it -1)."""
    inputs = _inputs([[0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]], [1.0, 1.0], weights=[[0.0, 0.0], [1, 1]])
    out, grad = _grad(name, inputs)
    assert out.loss.item() == pytest.approx(-0.5, rel=1e-12)
    assert grad[0].abs().max().item() == 0.0


def test_token_level_zero_weights_keep_their_count_unless_dropped():
    """grpo token-mean, r = 0, A = 1, weights [1, 0]: keep -> -(1 + 0) / 2; drop -> -1 / 1."""
    inputs = _inputs([[0.0, 0.0]], [[0.0, 0.0]], [1.0], weights=[[1.0, 0.0]])
    assert get_loss("grpo")(inputs, reduction="token-mean").loss.item() == pytest.approx(-0.5)
    dropped = get_loss("grpo")(inputs, reduction="token-mean", rollout_mask_count="drop")
    assert dropped.loss.item() == pytest.approx(-1.0)


@pytest.mark.parametrize("count, loss", [("keep", -0.5), ("drop", -1.0)])
def test_a_sequence_mode_removes_the_row_and_the_count_choice_decides_n(count, loss):
    """gmpo, r = 0, A = 1, two rows; row 0's product ratio 3 is outside the sequence IS mask (cap 2):
    it trains nothing; keep leaves it in the local count, (0 - 1) / 2, drop takes it out, -1 / 1."""
    inputs = _inputs(
        [[0.0, 0.0]] * 2, [[0.0, 0.0]] * 2, [1.0, 1.0], rollout=[[-math.log(1.5), -math.log(2)], [0.0, 0.0]]
    )
    out, grad = _grad("gmpo", inputs, rollout_is="sequence", rollout_is_mode="mask", rollout_mask_count=count)
    assert out.loss.item() == pytest.approx(loss, rel=1e-12)
    assert grad[0].abs().max().item() == 0.0
    assert out.metrics["rollout_seq_masked_frac"].item() == 0.5


# ---- hand values per mode --------------------------------------------------------------------


@pytest.mark.parametrize(
    "hparams, rollout, loss, metrics",
    [
        # token truncate: d = old - rollout = [0, ln 4] -> w = [1, 4] -> cap 2: -(1 + 2) / 2
        ({"rollout_is": "token"}, [[0.0, -math.log(4)]], -1.5, {"rollout_token_truncated_frac": 0.5}),
        # token truncate with a floor 0.5: w = [1/4 -> 0.5, 1]: -(0.5 + 1) / 2
        ({"rollout_is": "token", "rollout_is_threshold_low": 0.5}, [[math.log(4), 0.0]], -0.75, {}),
        # token mask [0.5, 2]: w = [1, 4 -> 0]: -(1 + 0) / 2 (the masked token stays counted)
        (
            {"rollout_is": "token", "rollout_is_mode": "mask", "rollout_is_threshold_low": 0.5},
            [[0.0, -math.log(4)]],
            -0.5,
            {"rollout_token_masked_frac": 0.5, "rollout_weight_max": 1.0},
        ),
        # the same, dropped from the count: -1 / 1
        (
            {
                "rollout_is": "token",
                "rollout_is_mode": "mask",
                "rollout_is_threshold_low": 0.5,
                "rollout_mask_count": "drop",
            },
            [[0.0, -math.log(4)]],
            -1.0,
            {},
        ),
        # sequence product: d = [ln 1.5, ln 2] -> 3 -> cap 2 on both tokens: -2
        (
            {"rollout_is": "sequence"},
            [[-math.log(1.5), -math.log(2)]],
            -2.0,
            {"rollout_seq_truncated_frac": 1.0, "rollout_weight_mean": 2.0},
        ),
        # sequence geometric mean: sqrt(3) = 1.7321 (under the cap)
        (
            {"rollout_is": "sequence", "rollout_is_sequence": "geometric_mean"},
            [[-math.log(1.5), -math.log(2)]],
            -math.sqrt(3),
            {},
        ),
        # sequence mask: 3 > 2, the row is masked: 0
        (
            {"rollout_is": "sequence", "rollout_is_mode": "mask"},
            [[-math.log(1.5), -math.log(2)]],
            0.0,
            {"rollout_seq_masked_frac": 1.0, "rollout_token_masked_frac": 1.0},
        ),
        # token_k2 rejection, d = [0, 1]: k2 = [0, 0.5] > 0.25 rejects token 2: -(1 + 0) / 2
        (
            {"rollout_rs": "token_k2", "rollout_rs_threshold": 0.25},
            [[0.0, -1.0]],
            -0.5,
            {"rollout_divergence": 0.25, "rollout_kl": -0.5},
        ),
        # token_k1 band [1/2, 2] on k1 = -d: d = [0, ln 3] -> k1 = -1.0986 < ln(1/2): token 2 rejected
        ({"rollout_rs": "token_k1", "rollout_rs_threshold": 2.0}, [[0.0, -math.log(3)]], -0.5, {}),
        # seq_sum_k3: d = [1, 0]: k3 = e - 2 = 0.718 > 0.5: the row is rejected
        (
            {"rollout_rs": "seq_sum_k3", "rollout_rs_threshold": 0.5},
            [[-1.0, 0.0]],
            0.0,
            {"rollout_divergence": math.e - 2},
        ),
        # batch normalisation: w = [1, 3] (cap 5), mean 2 -> [0.5, 1.5]: -(0.5 + 1.5) / 2 (unnormalised -2)
        (
            {"rollout_is": "token", "rollout_is_threshold": 5.0, "rollout_is_batch_normalize": True},
            [[0.0, -math.log(3)]],
            -1.0,
            {"rollout_weight_min": 0.5, "rollout_weight_max": 1.5},
        ),
        # seq_max_k2 under its threshold: nothing rejected, weights 1
        ({"rollout_rs": "seq_max_k2", "rollout_rs_threshold": 0.6}, [[-1.0, 0.0]], -1.0, {"rollout_divergence": 0.5}),
    ],
)
def test_hand_values(hparams, rollout, loss, metrics):
    """grpo with r = 0 (old = log_probs = 0), A = 1, token-mean: the loss is -mean_t w_t."""
    inputs = _inputs([[0.0, 0.0]], [[0.0, 0.0]], [1.0], rollout=rollout)
    out = get_loss("grpo")(inputs, reduction="token-mean", **hparams)
    assert out.loss.item() == pytest.approx(loss, rel=1e-12, abs=1e-15)
    for key, value in metrics.items():
        assert out.metrics[key].item() == pytest.approx(value, rel=1e-12), key


def test_off_policy_sequence_mask():
    """TRL's mask with threshold 0.5: row 0 (A = -1) has mean(rollout - new) = 1 > 0.5: masked;
    row 1 (A = +1) has the same gap but a positive advantage: kept. grpo seq-mean-token-mean,
    r = 0: (0 + -1) / 2. Without rollout log-probs the old ones stand in (gap 0: nothing masked)."""
    inputs = _inputs([[0.0], [0.0]], [[0.0], [0.0]], [-1.0, 1.0], rollout=[[1.0], [1.0]])
    out = get_loss("grpo")(inputs, off_policy_mask_threshold=0.5)
    assert out.loss.item() == pytest.approx(-0.5)
    assert out.metrics["rollout_seq_masked_frac"].item() == 0.5
    plain = _inputs([[0.0], [0.0]], [[0.0], [0.0]], [-1.0, 1.0])
    assert get_loss("grpo")(plain, off_policy_mask_threshold=0.5).loss.item() == pytest.approx(0.0)


def test_bypass_anchors_the_ratio_at_the_rollout_policy():
    """PPO-clip form: grpo with rollout_bypass equals grpo with old := rollout. REINFORCE form:
    gpg with rollout_bypass and token TIS: gradient of token t is -min(pi / pi_rollout, 2) * A_t."""
    batch = random_batch(4, 5, seed=3)
    rollout = batch.old_log_probs + 0.3 * torch.randn(4, 5, dtype=F64, generator=torch.Generator().manual_seed(1))
    bypass = LossInputs(batch.log_probs, batch.old_log_probs, batch.advantages, batch.mask, rollout_log_probs=rollout)
    anchored = LossInputs(batch.log_probs, rollout, batch.advantages, batch.mask)
    out, grad = _grad("grpo", bypass, rollout_bypass=True)
    want, want_grad = _grad("grpo", anchored)
    assert out.loss.item() == pytest.approx(want.loss.item(), rel=1e-12)
    assert torch.allclose(grad, want_grad, rtol=1e-12, atol=1e-15)
    _, grad = _grad("gpg", bypass, rollout_bypass=True, rollout_is="token", reduction="token-sum")
    ratio = (batch.log_probs.detach() - rollout).exp().clamp(max=2.0)
    want = torch.where(batch.mask, -ratio * batch.advantages[:, None], 0.0)
    assert torch.allclose(grad, want, rtol=1e-12, atol=1e-15)


# ---- a float64 reference of every mode, token by token ----------------------------------------


def _reference_weights(hp, log_probs, old, rollout, advantages, mask):
    """w (B, T) as Python floats, written from the frameworks' definitions (verl's
    rollout_corr_helper, TRL's off-policy mask), one row at a time; 0 at padding."""
    rows, length = mask.shape
    anchor = log_probs if hp.get("rollout_bypass") else old
    weights = [[0.0] * length for _ in range(rows)]
    for i in range(rows):
        valid = [t for t in range(length) if mask[i, t]]
        if not valid:
            continue
        d = {t: float(anchor[i, t] - rollout[i, t]) for t in valid}
        w = dict.fromkeys(valid, 1.0)
        hi, lo = hp.get("rollout_is_threshold", 2.0), hp.get("rollout_is_threshold_low")
        level = hp.get("rollout_is")
        if level is not None:
            if level == "token":
                raw = {t: math.exp(max(-20, min(20, d[t]))) for t in valid}
            else:
                total = (
                    sum(d.values())
                    if hp.get("rollout_is_sequence", "product") == "product"
                    else sum(d.values()) / len(valid)
                )
                raw = dict.fromkeys(valid, math.exp(max(-20, min(20, total))))
            for t in valid:
                if hp.get("rollout_is_mode", "truncate") == "truncate":
                    w[t] = min(hi, raw[t]) if lo is None else min(hi, max(lo, raw[t]))
                else:
                    w[t] = 0.0 if raw[t] > hi or (lo is not None and raw[t] < lo) else raw[t]
        option = hp.get("rollout_rs")
        if option is not None:
            k = {}
            for t in valid:
                x = max(-20, min(20, d[t]))
                k[t] = {"1": -x, "2": x * x / 2, "3": math.exp(x) - 1 - x}[option[-1]]
            high = hp["rollout_rs_threshold"]
            low = math.log(hp.get("rollout_rs_threshold_low") or 1 / high)

            def out(s, option=option, high=high, low=low):
                return (s > math.log(high) or s < low) if option.endswith("k1") else s > high

            if option.startswith("token"):
                reject = {t: out(k[t]) for t in valid}
            else:
                stat = {"sum": sum(k.values()), "mean": sum(k.values()) / len(valid), "max": max(k.values())}
                reject = dict.fromkeys(valid, out(stat[option.split("_")[1]]))
            w = {t: 0.0 if reject[t] else w[t] for t in valid}
        threshold = hp.get("off_policy_mask_threshold")
        if threshold is not None:
            gap = sum(float(rollout[i, t] - log_probs[i, t]) for t in valid) / len(valid)
            if float(advantages[i]) < 0 and gap > threshold:
                w = dict.fromkeys(valid, 0.0)
        for t in valid:
            weights[i][t] = w[t]
    return torch.tensor(weights, dtype=F64)


MODES = [
    {"rollout_is": "token"},
    {"rollout_is": "token", "rollout_is_threshold": 1.3, "rollout_is_threshold_low": 0.7},
    {"rollout_is": "token", "rollout_is_mode": "mask", "rollout_is_threshold": 1.3, "rollout_is_threshold_low": 0.7},
    {"rollout_is": "token", "rollout_is_mode": "mask", "rollout_is_threshold": 1.3},
    {"rollout_is": "sequence", "rollout_is_threshold": 1.5, "rollout_is_threshold_low": 0.5},
    {"rollout_is": "sequence", "rollout_is_mode": "mask", "rollout_is_threshold": 1.5, "rollout_is_threshold_low": 0.5},
    {"rollout_is": "sequence", "rollout_is_sequence": "geometric_mean", "rollout_is_threshold": 1.1},
    {
        "rollout_is": "sequence",
        "rollout_is_sequence": "geometric_mean",
        "rollout_is_mode": "mask",
        "rollout_is_threshold": 1.1,
    },
    *({"rollout_rs": option, "rollout_rs_threshold": 1.2 if option.endswith("k1") else 0.05} for option in RS_OPTIONS),
    {"rollout_rs": "seq_mean_k1", "rollout_rs_threshold": 1.1, "rollout_rs_threshold_low": 0.95},
    {"off_policy_mask_threshold": 0.02},
    {"rollout_bypass": True, "rollout_is": "token", "rollout_is_threshold": 1.3},
    {"rollout_bypass": True, "rollout_rs": "token_k3", "rollout_rs_threshold": 0.02},
    {"rollout_is": "token", "rollout_rs": "seq_max_k2", "rollout_rs_threshold": 0.2, "off_policy_mask_threshold": 0.05},
]
"""Every level, mode, sequence aggregate, rejection option, the off-policy mask and bypass."""


def _case(seed=0):
    inputs = random_batch(6, 9, seed=seed, spread=0.2)
    noise = torch.randn(6, 9, dtype=F64, generator=torch.Generator().manual_seed(seed + 1))
    inputs.rollout_log_probs = inputs.old_log_probs + 0.15 * noise
    return inputs


@pytest.mark.parametrize("hparams", MODES, ids=lambda hp: ",".join(f"{k}={v}" for k, v in hp.items()))
def test_every_mode_matches_the_float64_reference(hparams):
    """gpg with token-sum exposes each token's weight: its gradient is -A_t * w_t. Keep mode: the
    weights act on a fixed mask; the batch has mixed lengths, both advantage signs and a zero."""
    inputs = _case()
    _, grad = _grad("gpg", inputs, reduction="token-sum", **hparams)
    want = _reference_weights(
        hparams,
        inputs.log_probs.detach(),
        inputs.old_log_probs,
        inputs.rollout_log_probs,
        inputs.advantages,
        inputs.mask,
    )
    assert 0 < int((want != 1).sum()) or hparams.get("rollout_is") is not None  # the mode acts on this batch
    assert torch.allclose(grad, -inputs.advantages[:, None] * want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("hparams", MODES[:8:2], ids=lambda hp: ",".join(f"{k}={v}" for k, v in hp.items()))
@pytest.mark.parametrize("impl", ["eager", None])
def test_sequence_level_losses_take_the_reference_weights(hparams, impl):
    """gmpo (eager and fused) with a correction equals gmpo with the reference weights passed as
    precomputed rollout_is_weights (the same zero-weight rule)."""
    inputs = _case(seed=4)
    out, grad = _grad("gmpo", inputs, impl=impl, **hparams)
    weights = _reference_weights(
        hparams,
        inputs.log_probs.detach(),
        inputs.old_log_probs,
        inputs.rollout_log_probs,
        inputs.advantages,
        inputs.mask,
    )
    plain = LossInputs(
        inputs.log_probs, inputs.old_log_probs, inputs.advantages, inputs.mask, rollout_is_weights=weights
    )
    want, want_grad = _grad("gmpo", plain, impl="eager")
    assert out.loss.item() == pytest.approx(want.loss.item(), rel=1e-12)
    assert torch.allclose(grad, want_grad, rtol=1e-10, atol=1e-15)


# ---- non-finite rule, padding, split invariance ---------------------------------------------


@pytest.mark.parametrize("hparams", [{}, *MODES], ids=lambda hp: ",".join(f"{k}={v}" for k, v in hp.items()) or "none")
@pytest.mark.parametrize("name", ["grpo", "gmpo"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_rollout_log_prob_gives_a_non_finite_loss_and_gradient(hparams, name, bad):
    inputs = _case()
    inputs.rollout_log_probs = inputs.rollout_log_probs.clone()
    inputs.rollout_log_probs[1, 2] = bad  # row 1 has 6 valid tokens
    out, grad = _grad(name, inputs, validate=False, **hparams)
    assert not torch.isfinite(out.loss)
    assert not torch.isfinite(grad).all()
    with pytest.raises(ValueError, match="rollout_log_probs: expected finite values"):
        get_loss(name)(inputs, **hparams)


@pytest.mark.parametrize("hparams", MODES[::3], ids=lambda hp: ",".join(f"{k}={v}" for k, v in hp.items()))
def test_padding_of_rollout_log_probs_is_inert(hparams):
    inputs = _case()
    clean, clean_grad = _grad("gmpo", inputs, **hparams)
    inputs.rollout_log_probs = torch.where(inputs.mask, inputs.rollout_log_probs, torch.nan)
    out, grad = _grad("gmpo", inputs, **hparams)
    assert out.loss.item() == clean.loss.item() and torch.equal(grad, clean_grad)


def _split_grad(name, inputs, parts, hparams, *, ranks=False):
    """The gradient accumulated over ``parts`` micro-batches with the global counts, or with
    ``ranks`` over as many simulated data-parallel ranks (dp_size = parts, gradients averaged)."""
    total = torch.zeros_like(inputs.log_probs)
    rows = inputs.mask.shape[0]
    dp = parts if ranks else 1
    batch = BatchInfo(dp_size=dp, global_batch_size=rows, global_num_tokens=int(inputs.mask.sum()))
    for index in torch.arange(rows).chunk(parts):
        part = LossInputs(
            inputs.log_probs[index],
            inputs.old_log_probs[index],
            inputs.advantages[index],
            inputs.mask[index],
            rollout_log_probs=inputs.rollout_log_probs[index],
        )
        _, grad = _grad(name, part, batch, **hparams)
        total[index] += grad / dp
    return total


@pytest.mark.parametrize("hparams", MODES, ids=lambda hp: ",".join(f"{k}={v}" for k, v in hp.items()))
@pytest.mark.parametrize("name", ["dapo", "gmpo"])
def test_every_mode_is_split_invariant(hparams, name):
    """3 micro-batches, and 2 simulated ranks, with the global counts: the whole batch's gradient."""
    inputs = _case(seed=2)
    whole = _split_grad(name, inputs, 1, hparams)
    assert torch.allclose(_split_grad(name, inputs, 3, hparams), whole, rtol=1e-10, atol=1e-15)
    assert torch.allclose(_split_grad(name, inputs, 2, hparams, ranks=True), whole, rtol=1e-10, atol=1e-15)


def test_batch_normalisation_is_declared_split_dependent():
    """rollout_is_batch_normalize divides by the micro-batch's mean weight: 3 micro-batches give
    another gradient than the whole batch (declared in SPLIT_DEPENDENT)."""
    assert SPLIT_DEPENDENT == ("rollout_is_batch_normalize",)
    hparams = {"rollout_is": "token", "rollout_is_threshold": 5.0, "rollout_is_batch_normalize": True}
    inputs = _case(seed=2)
    whole = _split_grad("dapo", inputs, 1, hparams)
    assert (_split_grad("dapo", inputs, 3, hparams) - whole).abs().max().item() > 1e-4


# ---- options, errors, metrics ------------------------------------------------------------------


def test_metrics_have_one_set_of_names():
    inputs = _case()
    out = get_loss("gmpo")(inputs, rollout_is="token")
    assert set(CORRECTION_METRIC_KEYS) <= set(out.metrics)
    assert not set(CORRECTION_METRIC_KEYS) & set(get_loss("gmpo")(random_batch()).metrics)  # nothing asked, none


@pytest.mark.parametrize(
    "hparams, words",
    [
        ({"rollout_is": "tokens"}, ["rollout_is must be", "'token'"]),
        ({"rollout_is_mode": "clip"}, ["rollout_is_mode must be"]),
        ({"rollout_is_threshold": 0.0}, ["rollout_is_threshold must be"]),
        ({"rollout_is_threshold": 2.0, "rollout_is_threshold_low": 3.0}, ["rollout_is_threshold_low must be <="]),
        ({"rollout_rs": "seq_max_k1", "rollout_rs_threshold": 1.0}, ["rollout_rs must be"]),
        ({"rollout_rs": "token_k2"}, ["rollout_rs_threshold is required"]),
        ({"rollout_rs": "token_k2", "rollout_rs_threshold": 1.0, "rollout_rs_threshold_low": 0.5}, ["k1 options"]),
        ({"rollout_mask_count": "remove"}, ["rollout_mask_count must be"]),
        ({"rollout_bypass": 1}, ["rollout_bypass must be True or False"]),
    ],
)
def test_a_bad_option_is_one_line_naming_it(hparams, words):
    with pytest.raises(ValueError) as error:
        get_loss("dapo")(_case(), **hparams)
    message = str(error.value)
    assert message.startswith("dapo: ") and "\n" not in message and all(w in message for w in words), message


def test_options_that_need_rollout_log_probs_say_so():
    inputs = random_batch()
    for hparams in (
        {"rollout_is": "token"},
        {"rollout_bypass": True},
        {"rollout_rs": "token_k3", "rollout_rs_threshold": 1},
    ):
        with pytest.raises(ValueError, match="rollout_log_probs \\(B, T\\) is required"):
            get_loss("gmpo")(inputs, **hparams)
    inputs = _case()
    inputs.rollout_is_weights = torch.ones(6, 9, dtype=F64)
    with pytest.raises(ValueError, match="two IS weights"):
        get_loss("gmpo")(inputs, rollout_is="token")
    with pytest.raises(ValueError, match="rollout_log_probs: expected shape"):
        get_loss("gmpo")(
            LossInputs(
                inputs.log_probs,
                inputs.old_log_probs,
                inputs.advantages,
                inputs.mask,
                rollout_log_probs=inputs.old_log_probs[:, :3],
            )
        )


def test_every_loss_accepts_the_options_and_none_declares_them():
    """One shared set: every built-in loss takes the options (not in its defaults), a misspelt one
    gets a did-you-mean, and resolve() lists an option only where it is given."""
    inputs = _case()
    for spec in __import__("gmpo_plugins").list_losses():
        assert not set(CORRECTION_DEFAULTS) & set(spec.defaults), spec.name
        hp = {"rollout_is": "token"} if not spec.sequence_level else {"rollout_is": "sequence"}
        advantages = inputs.advantages
        case = LossInputs(
            inputs.log_probs, inputs.old_log_probs, advantages, inputs.mask, rollout_log_probs=inputs.rollout_log_probs
        )
        assert torch.isfinite(spec(complete(case, spec.name), **hp).loss), spec.name
    with pytest.raises(TypeError, match="did you mean 'rollout_is_mode'"):
        get_loss("gmpo").resolve({"rollout_is_mod": "mask"})
    assert "rollout_is" not in get_loss("gmpo").resolve({})
    assert get_loss("gmpo").resolve({"rollout_is": "token"})["rollout_is"] == "token"


# ---- the two SkyRL losses -----------------------------------------------------------------------


def test_rollout_is_hand_values():
    """r = [1, 1.5, 0.5, 1.1], eps 0.2: f = [1, 0, 0, 1.1]; A = 2, token-sum: the gradient is
    -f * A = [-2, 0, 0, -2.2]; the loss value -sum f A log pi (log pi = log r + old, old = -1)."""
    ratios = torch.tensor([[1.0, 1.5, 0.5, 1.1]], dtype=F64)
    old = torch.full((1, 4), -1.0, dtype=F64)
    inputs = LossInputs(
        (old + ratios.log()).requires_grad_(), old, torch.tensor([2.0], dtype=F64), torch.ones(1, 4, dtype=torch.bool)
    )
    out, grad = _grad("rollout_is", inputs, reduction="token-sum")
    assert torch.allclose(grad, torch.tensor([[-2.0, 0.0, 0.0, -2.2]], dtype=F64), rtol=1e-12)
    f = torch.tensor([1.0, 0.0, 0.0, 1.1], dtype=F64)
    assert out.loss.item() == pytest.approx(float(-(f * 2 * inputs.log_probs.detach()[0]).sum()), rel=1e-12)
    assert out.metrics["clip_frac_low"].item() == 0.25 and out.metrics["clip_frac_high"].item() == 0.25


def test_importance_sampling_hand_values():
    """l_t = -r_t A_t: r = [1, 2], A = 3, token-mean: loss -(3 + 6) / 2 = -4.5, gradient -r A / 2."""
    old = torch.zeros(1, 2, dtype=F64)
    inputs = LossInputs(
        torch.tensor([[0.0, math.log(2)]], dtype=F64, requires_grad=True),
        old,
        torch.tensor([3.0], dtype=F64),
        torch.ones(1, 2, dtype=torch.bool),
    )
    out, grad = _grad("importance_sampling", inputs)
    assert out.loss.item() == pytest.approx(-4.5, rel=1e-12)
    assert torch.allclose(grad, torch.tensor([[-1.5, -3.0]], dtype=F64), rtol=1e-12)


# ---- a fuzz: random options on random batches -------------------------------------------------


def _random_options(draw: st.DrawFn) -> dict:
    options: dict = {}
    if draw(st.booleans()):
        options["rollout_is"] = draw(st.sampled_from(["token", "sequence"]))
        options["rollout_is_mode"] = draw(st.sampled_from(["truncate", "mask"]))
        options["rollout_is_sequence"] = draw(st.sampled_from(["product", "geometric_mean"]))
        high = draw(st.floats(1.01, 3.0))
        options["rollout_is_threshold"] = high
        options["rollout_is_threshold_low"] = draw(st.one_of(st.none(), st.floats(0.2, 0.99)))
    if draw(st.booleans()):
        option = draw(st.sampled_from(RS_OPTIONS))
        options["rollout_rs"] = option
        options["rollout_rs_threshold"] = draw(st.floats(1.01, 2.0) if option.endswith("k1") else st.floats(0.001, 0.5))
    if draw(st.booleans()):
        options["off_policy_mask_threshold"] = draw(st.floats(-0.1, 0.1))
    options["rollout_bypass"] = draw(st.booleans())
    return options


@st.composite
def _fuzz_cases(draw: st.DrawFn) -> tuple:
    return _random_options(draw), draw(st.integers(0, 10_000)), draw(st.floats(0.01, 1.0))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_fuzz_cases())
def test_fuzz_options_match_the_reference_and_split(case):
    """Any combination of options on a random batch: each token's weight is the float64
    reference's (gpg, token-sum), the loss of gmpo is finite, and 3 micro-batches of dapo give the
    whole batch's gradient."""
    options, seed, spread = case
    inputs = random_batch(5, 7, seed=seed, spread=0.3)
    noise = torch.randn(5, 7, dtype=F64, generator=torch.Generator().manual_seed(seed + 7))
    inputs.rollout_log_probs = inputs.old_log_probs + spread * noise
    _, grad = _grad("gpg", inputs, reduction="token-sum", **options)
    want = _reference_weights(
        options,
        inputs.log_probs.detach(),
        inputs.old_log_probs,
        inputs.rollout_log_probs,
        inputs.advantages,
        inputs.mask,
    )
    assert torch.allclose(grad, -inputs.advantages[:, None] * want, rtol=1e-10, atol=1e-12)
    assert torch.isfinite(get_loss("gmpo")(inputs, **options).loss)
    whole = _split_grad("dapo", inputs, 1, options)
    assert torch.allclose(_split_grad("dapo", inputs, 3, options), whole, rtol=1e-10, atol=1e-15)
