"""What OpenRLHF's own trainer does when the loss gets a NaN: one step of ``gmpo-openrlhf
--actor.policy_loss_type nonfinite_gmpo`` (gmpo fed one NaN advantage at a valid token of every
micro-batch, value checks off: nonfinite_loss.py), 4 micro-batches of 1 sample under DeepSpeed ZeRO-2.
The loss and the gradient are NaN (the registry's rule) and OpenRLHF logs the NaN ``policy_loss``; what
happens next is DeepSpeed's, and depends on the dtype (docs/api.md's table, OpenRLHF's row):

bf16, OpenRLHF's default (its parser offers bf16 and fp16)
    DeepSpeed's ZeRO optimizer checks the gradients for inf and NaN (``check_grad_overflow``, on for
    bf16 and fp16) and skips the step: the weights stay the initial ones, bit for bit, and the
    learning-rate schedule does not advance. The grad norm OpenRLHF logs is 0.0, not NaN: on overflow
    the optimizer returns before computing the norm, and ``get_global_grad_norm`` gives the last one it
    computed (0 before its first).
fp32, only through the test-only sitecustomize (OpenRLHF refuses it)
    DeepSpeed has no overflow check and takes the step with the NaN gradient: every weight that the
    step's tokens reach becomes NaN, and the rollout engine receives the NaN weights at the step's sync.
    The grad norm OpenRLHF logs is sqrt(2), not NaN: ZeRO-1/2 replaces each parameter group's non-finite
    norm by -1 (``mask_nan_or_inf_with_val_inplace``) and OpenRLHF's optimizer has two groups (with and
    without weight decay), so the norm is that of (-1, -1); clipping by it leaves the gradient NaN.

Both runs are in the ``openrlhf_e2e_invariance`` session with the other one-step runs (noxfile.py).
"""

from __future__ import annotations

import math
import os

import pytest
import torch

from tests.broken_plugins import distribution
from tests.openrlhf.e2e import nonfinite_loss
from tests.openrlhf.e2e.invariance import FP32_ARGS
from tests.openrlhf.e2e.runner import CHECKOUT, NO_KL_ARGS, SHIMS, STANDINS, initial_weights, run_gmpo_openrlhf

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
LR = 1e-2  # a step taken moves every weight past bf16's rounding (test_two_steps)
MIN_LR = LR * 0.1  # where OpenRLHF's schedule (--actor.min_lr_ratio 0.1) is after the run's one step
ARGS = ("--actor.policy_loss_type", nonfinite_loss.NAME, "--actor.adam.lr", str(LR), *NO_KL_ARGS)
EMBEDDING = "model.embed_tokens.weight"


def one_step(fixtures, out, dtype_args: tuple):
    """The run, with the plugin installed (a ``.dist-info`` folder first on the path) and value checks off."""
    site = out / "site"
    site.mkdir()
    distribution(site, "gmpo-nonfinite-test", nonfinite_loss.ENTRY_POINTS)
    env = {
        "PYTHONPATH": os.pathsep.join(map(str, [site, CHECKOUT, STANDINS, SHIMS])),
        "GMPO_PLUGINS_VALIDATE": "never",
    }
    run = run_gmpo_openrlhf(fixtures, out / "run", [*ARGS, *dtype_args], extra_env=env).check()
    calls = [(call["actor_class"], call["policy_loss_type"], call["rows"]) for call in run.loss_calls()]
    assert calls == [("PolicyModelActor", nonfinite_loss.NAME, 1)] * 4  # every micro-batch got its NaN
    logged = {name: value for name, [(_, value)] in run.scalars().items()}
    assert logged["train/gmpo/nonfinite_tokens"] == 4  # the loss's count over the step: 1 per micro-batch
    assert logged["train/group_reward_std"] > 0.1  # the rollout itself was fine: the advantages are not 0
    assert math.isnan(logged["train/policy_loss"])
    return run, logged


def test_bf16_skips_the_step_and_logs_a_grad_norm_of_0(fixtures, tmp_path):
    run, logged = one_step(fixtures, tmp_path, ())
    assert logged["train/actor_grad_norm"] == 0
    assert logged["train/actor_lr"] == pytest.approx(LR, rel=1e-6)  # the schedule did not advance
    before, after = initial_weights(fixtures["model"]), run.actor_weights()
    assert before.keys() == after.keys()
    assert all(torch.equal(after[name], before[name]) for name in before)  # bf16 both


def test_fp32_steps_into_nan_weights_and_logs_a_grad_norm_of_sqrt_2(fixtures, tmp_path):
    run, logged = one_step(fixtures, tmp_path, FP32_ARGS)
    assert logged["train/actor_grad_norm"] == pytest.approx(math.sqrt(2), rel=1e-6)
    assert logged["train/actor_lr"] == pytest.approx(MIN_LR, rel=1e-6)  # the step counted as taken
    before, after = initial_weights(fixtures["model"]), run.actor_weights()
    assert before.keys() == after.keys()
    for name, weight in after.items():
        nan = weight.isnan()
        if name == EMBEDDING:  # whole rows: those of the step's tokens (the others have a zero gradient)
            assert nan.any() and torch.equal(nan.all(1), nan.any(1)), name
        else:
            assert nan.all(), name
        assert torch.equal(weight[~nan], before[name].float()[~nan]), name
    engine = run.engine()
    assert engine["syncs"] == 1
    for name, weight in after.items():  # the rollout engine now generates from the NaN weights
        torch.testing.assert_close(engine["state_dict"][name], weight, rtol=0, atol=0, equal_nan=True)
