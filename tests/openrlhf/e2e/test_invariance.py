"""Invariance where OpenRLHF splits the batch: one fp32 step of ``gmpo-openrlhf --actor.policy_loss_type gmpo``
with 1, 2 and 4 micro-batches (``--train.micro_batch_size`` 4, 2, 1) on one actor rank, and on 2 actor
ranks (``--actor.num_gpus_per_node 2``, 2 micro-batches each), gives the same weight update; the other
``--actor.loss_agg_mode`` gives it with 1 micro-batch; the same step under ZeRO stage 3 gives it too (module
docstring of ``invariance`` for the set-up and the measure).

Tolerance ``1e-4`` of the update, from fp32 summation order. Every split computes the same sums in another
order and in other shapes (a micro-batch is padded to its own longest sample; 2 ranks add their gradients
in DeepSpeed's all-reduce): each sum of ``n`` terms then differs by up to ``n * u`` relative to the sum of
their magnitudes, ``u = 2**-24 = 6e-8``. The longest sums here are the weight gradients over the step's
tokens (4 samples x at most 40 positions: ``160 u = 1e-5``) and the reductions over the vocabulary (64)
and hidden sizes (32, 64); forward, log-softmax, ratio and backward through 2 layers chain a handful of
them, ``~5e-5`` in all, and cancellation in the gradient entries can add a small factor on top. Saving
the fp32 weights rounds ``w_after`` by ``u |w|``: with ``|w|`` about 13 (the norm weights are 1) and
``|delta| = 0.1 |g|`` about 0.8 (OpenRLHF logs ``|g|`` about 8), ``1e-6`` of the update. Measured: 1e-7.
A wrong normalisation across micro-batches or ranks is a factor (a 2-way split summed instead of
averaged is 100%), 4 orders above the tolerance.
That the update measures the gradient's scale (and not only its sign, as Adam's first step otherwise
would) is checked against the gradient norm OpenRLHF logs: ``|delta| = (lr / eps) |g|``, short of it by at
most ``max|g_i| / eps <= |g| / eps``.
For gmpo the reduction is fixed by the method (the per-sequence mean), so both ``loss_agg_mode`` values
give one update too.
"""

from __future__ import annotations

import pytest

from tests.openrlhf.e2e.invariance import (
    EPS,
    LOSS_AGG_MODES,
    LR_OVER_EPS,
    SPLITS,
    calls_per_rank,
    micro_batches_per_rank,
    one_step,
    relative_difference,
    update,
)
from tests.openrlhf.e2e.runner import CHECKOUT, initial_weights

pytestmark = [pytest.mark.ray, pytest.mark.timeout(1800)]
TOLERANCE = 1e-4
REFERENCE = SPLITS[0]  # 1 rank, 1 micro-batch


@pytest.fixture(scope="module")
def runs(fixtures, tmp_path_factory):
    """``runs(mode, (ranks, micro_batch_size), zero_stage=2)``: each run made once per module."""
    root = tmp_path_factory.mktemp("gmpo-invariance")
    done = {}

    def get(mode, split, zero_stage=2):
        key = (mode, split, zero_stage)
        if key not in done:
            ranks, size = split
            extra = ("--ds.zero_stage", str(zero_stage))
            out = root / f"{mode}-{ranks}x{size}-zero{zero_stage}"
            done[key] = one_step(fixtures, out, "gmpo", mode, size, extra, ranks)
        return done[key]

    return get


# The splits compared with the reference, per loss_agg_mode. For gmpo the mode reaches only PolicyLoss's
# token_level_loss, which does not change its computation: test_both_loss_agg_modes_give_the_gmpo_update
# shows the other mode gives the reference's update, so its splits would repeat these runs
CHECKED = {"token-mean": SPLITS[1:]}


@pytest.mark.parametrize("mode", sorted(CHECKED))
def test_splits_give_the_same_update(runs, fixtures, mode):
    before = initial_weights(fixtures["model"])
    reference = runs(mode, REFERENCE)
    for ranks, size in CHECKED[mode]:
        run = runs(mode, (ranks, size))
        assert run.completions() == reference.completions()  # the same samples
        # the split happened: each rank ran the loss on its own micro-batches, in its own process
        micro_batches = micro_batches_per_rank(ranks, size)
        assert calls_per_rank(run) == {rank: [size] * micro_batches for rank in range(ranks)}, run.loss_calls()
        assert {call["actor_class"] for call in run.loss_calls()} == {"PolicyModelActor"}
        assert len({call["pid"] for call in run.loss_calls()}) == ranks
        difference = relative_difference(update(run, before), update(reference, before))
        print(f"gmpo {mode}: {ranks} rank(s) x {micro_batches} micro-batch(es): {difference:.1e}")
        assert difference < TOLERANCE, (mode, ranks, micro_batches, difference)


def test_the_update_is_the_logged_gradient_times_lr_over_eps(runs, fixtures):
    before = initial_weights(fixtures["model"])
    run = runs(LOSS_AGG_MODES[0], REFERENCE)
    [(_, grad_norm)] = run.scalars()["train/actor_grad_norm"]
    delta = update(run, before)
    norm = sum(float(tensor.pow(2).sum()) for tensor in delta.values()) ** 0.5
    shortfall = 1 - norm / (LR_OVER_EPS * grad_norm)
    print(f"|delta| / (lr / eps |g|) = {norm / (LR_OVER_EPS * grad_norm):.6f}, |g| = {grad_norm:.4f}")
    assert grad_norm > 0 and -TOLERANCE < shortfall < grad_norm / EPS + TOLERANCE, (norm, grad_norm)


def test_both_loss_agg_modes_give_the_gmpo_update(runs, fixtures):
    before = initial_weights(fixtures["model"])
    token, sequence = (update(runs(mode, REFERENCE), before) for mode in LOSS_AGG_MODES)
    difference = relative_difference(sequence, token)
    print(f"gmpo seq-mean-token-mean vs token-mean, 1 micro-batch: {difference:.1e}")
    assert difference < TOLERANCE


def test_zero_stage_3_gives_the_zero_2_update(runs, fixtures):
    before = initial_weights(fixtures["model"])
    mode = LOSS_AGG_MODES[0]
    zero3 = runs(mode, (1, 2), zero_stage=3)
    assert calls_per_rank(zero3) == {0: [2, 2]}
    difference = relative_difference(update(zero3, before), update(runs(mode, (1, 2)), before))
    print(f"gmpo token-mean, 2 micro-batches: ZeRO-3 vs ZeRO-2: {difference:.1e}")
    assert difference < TOLERANCE


def test_sapo_splits_give_the_same_update(fixtures, tmp_path_factory):
    """A loss OpenRLHF lacks, through the real ``train_ppo_ray``: sapo (``--actor.loss_agg_mode
    token-mean``, one of its reductions) with 4 micro-batches gives the 1-micro-batch update."""
    before = initial_weights(fixtures["model"])
    root = tmp_path_factory.mktemp("sapo-invariance")
    reference = one_step(fixtures, root / "1x4", "sapo", "token-mean", 4)
    split = one_step(fixtures, root / "1x1", "sapo", "token-mean", 1)
    assert split.completions() == reference.completions()
    assert calls_per_rank(split) == {0: [1] * 4}, split.loss_calls()
    assert {call["policy_loss_type"] for call in split.loss_calls()} == {"sapo"}
    assert {call["gmpo_plugins"] for call in split.loss_calls()} == {str(CHECKOUT / "gmpo_plugins" / "__init__.py")}
    difference = relative_difference(update(split, before), update(reference, before))
    print(f"sapo token-mean: 1 rank x 4 micro-batches: {difference:.1e}")
    assert 0 < sum(float(t.abs().sum()) for t in update(reference, before).values())
    assert difference < TOLERANCE
