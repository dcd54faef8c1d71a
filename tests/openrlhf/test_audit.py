"""``gmpo-plugins audit`` in the openrlhf environment: the live verdicts of OpenRLHF's own
losses and of its rollout correction against docs/audit/openrlhf.json, and the smallest reproducer
of its gspo's missing overflow guard."""

from __future__ import annotations

import math

import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss

from ..audit_cells import assert_cells_unchanged, assert_corrections_identical


def test_verdicts_match_committed_cells():
    assert_cells_unchanged("openrlhf")


def test_upstream_gspo_no_overflow_guard_float32():
    """One float32 token, log ratio 89 (> ln(float32 max) = 88.72), A = -1: OpenRLHF's gspo
    takes exp of the mean log ratio as it is, exp(89) = inf, loss = -min(inf * -1, ...) = inf.
    The registry's gspo bounds each token's log ratio at 20 first: loss = e^20 = 4.85e8,
    finite. Fails once OpenRLHF guards."""
    from openrlhf.models.loss import PolicyLoss

    log_probs = torch.tensor([[-0.5]], requires_grad=True)
    old, advantages, mask = torch.tensor([[-89.5]]), torch.tensor([-1.0]), torch.tensor([[True]])
    theirs, _, _, _, _ = PolicyLoss(policy_loss_type="gspo")(
        log_probs, old, advantages[:, None] * mask, action_mask=mask.long()
    )
    ours = get_loss("gspo")(LossInputs(log_probs, old, advantages, mask), BatchInfo(1, 1, 1))

    assert math.isinf(float(theirs.detach()))
    assert float(ours.loss.detach()) == float(torch.tensor(20.0).exp())


def test_openrlhfs_rollout_correction_equals_the_registrys():
    """OpenRLHF's own train/rollout IS correction (``PolicyLoss`` with ``is_correction_*``, gating ratio)."""
    assert_corrections_identical("openrlhf", "openrlhf")
