"""``gmpo-plugins audit`` in the trl environment: the live verdicts of TRL's and
Liger-Kernel's own losses against docs/audit/trl.json, and the smallest reproducer of TRL's
missing overflow guard."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.compare.audit.callers.trl import ConfiguredTrainer, trainer_config
from gmpo_plugins.compare.backends.trl_gmpo import completion_inputs

from ..audit_cells import assert_cells_unchanged


def test_verdicts_match_committed_cells():
    assert_cells_unchanged("trl")


def test_upstream_no_overflow_guard_float32():
    """One float32 token, log ratio 89 (> ln(float32 max) = 88.72), A = -1 (the unclipped side):
    TRL's coef_1 = exp(89) = inf, loss = -min(inf * -1, 1.2 * -1) = inf. The registry's grpo
    bounds the log ratio at 20 first: loss = e^20 = 4.85e8, finite. Fails once TRL guards."""
    from trl import GRPOTrainer

    log_probs = torch.tensor([[-0.5]], requires_grad=True)
    old, advantages, mask = torch.tensor([[-89.5]]), torch.tensor([-1.0]), torch.tensor([[True]])
    args = trainer_config("GRPOTrainer", {"loss_type": "grpo", "epsilon": 0.2, "epsilon_high": 0.2})
    args.steps_per_generation = 1
    inputs = completion_inputs(log_probs, old, advantages, mask)
    inputs["num_items_in_batch"] = torch.tensor(1)
    trl_loss = GRPOTrainer._compute_loss(ConfiguredTrainer(args, log_probs, 1, 1), None, inputs)

    ours = get_loss("grpo")(LossInputs(log_probs, old, advantages, mask), BatchInfo(1, 1, 1))

    assert math.isinf(float(trl_loss.detach()))
    assert float(ours.loss.detach()) == float(torch.tensor(20.0).exp())


def test_upstream_liger_no_overflow_guard_float32():
    """Liger-Kernel's fused GRPO loss from hidden states: a two-word vocabulary, weight [[1], [0]],
    hidden h = -1 - log(1 - e^-1) so the token's log-prob is log sigmoid(h) = -1; old log-prob
    -90, so the log ratio is 89 (> ln(float32 max) = 88.72) and A = -1: exp(89) = inf, the
    loss inf. Fails once Liger-Kernel guards."""
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    hidden = (torch.tensor(-1.0) - torch.log(-torch.expm1(torch.tensor(-1.0)))).reshape(1, 1, 1).requires_grad_()
    weight = torch.tensor([[1.0], [0.0]])
    loss_fn = LigerFusedLinearGRPOLoss(beta=0.0, compiled=False, use_ref_model=False, loss_type="grpo")
    loss, _ = loss_fn(
        hidden,
        weight,
        torch.zeros(1, 1, dtype=torch.long),
        torch.ones(1, 1, dtype=torch.long),
        torch.tensor([-1.0]),
        old_per_token_logps=torch.tensor([[-90.0]]),
    )
    loss.backward()

    assert math.isinf(float(loss.detach()))
    assert hidden.grad is not None and torch.isnan(hidden.grad).all()


def test_upstream_vespo_zeroes_a_nan_weight():
    """One row of two tokens, A = 1, log-probs -1 and -1, old log-probs -1 and NaN (a NaN at a
    valid position): TRL's vespo weight phi = exp(lam + k lw - lam e^lw) is NaN and
    ``nan_to_num`` makes it 0, so the loss is -0 * A * log pi = 0 with a zero gradient: the
    sequence silently trains nothing. The registry refuses the input (a ValueError naming
    old_log_probs). Fails once TRL stops zeroing it."""
    from trl import GRPOTrainer

    log_probs = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    old, advantages, mask = torch.tensor([[-1.0, math.nan]]), torch.tensor([1.0]), torch.tensor([[True, True]])
    args = trainer_config("GRPOTrainer", {"loss_type": "vespo"})
    args.steps_per_generation = 1
    inputs = completion_inputs(log_probs, old, advantages, mask)
    inputs["num_items_in_batch"] = torch.tensor(2)
    trainer = ConfiguredTrainer(args, log_probs, 1, 1)
    trl_loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    trl_loss.backward()

    assert float(trl_loss.detach()) == 0.0 and log_probs.grad is not None and not log_probs.grad.any()
    with pytest.raises(ValueError, match="old_log_probs"):
        get_loss("vespo")(LossInputs(log_probs.detach(), old, advantages, mask), BatchInfo(1, 1, 2))


def test_upstream_liger_vespo_zeroes_a_nan_weight():
    """Liger-Kernel's vespo weight, the same construction as TRL's (``nan_to_num`` of phi): a NaN
    old log-prob at a valid position (the second of two tokens, A = 1) gives phi = 0 and the
    finite loss 0. Fails once Liger-Kernel stops zeroing it."""
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    hidden = (torch.tensor(-1.0) - torch.log(-torch.expm1(torch.tensor(-1.0)))).expand(1, 2, 1).clone()
    loss_fn = LigerFusedLinearGRPOLoss(beta=0.0, compiled=False, use_ref_model=False, loss_type="vespo")
    loss, _ = loss_fn(
        hidden.requires_grad_(),
        torch.tensor([[1.0], [0.0]]),
        torch.zeros(1, 2, dtype=torch.long),
        torch.ones(1, 2, dtype=torch.long),
        torch.tensor([1.0]),
        old_per_token_logps=torch.tensor([[-1.0, math.nan]]),
    )

    assert float(loss.detach()) == 0.0
