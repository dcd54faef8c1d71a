"""``gmpo-plugins audit`` in the trl environment: the live verdicts of TRL's and
Liger-Kernel's own losses against docs/audit/trl.json, and the smallest reproducer of TRL's
missing overflow guard."""

from __future__ import annotations

import math

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
