"""Upstream defects the audit found: data for the docs page, each held by a test that
reproduces the upstream behaviour in its smallest form (it fails once upstream fixes it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Defect:
    """One upstream defect.

    Args:
        framework: the framework's name in the audit.
        losses: the registry losses whose cells it affects.
        title: one line.
        explanation: what the framework does, and what its users get.
        upstream: the upstream issue, or "not reported".
        test: the test holding the reproducer (path::name).
    """

    framework: str
    losses: tuple[str, ...]
    title: str
    explanation: str
    upstream: str
    test: str


DEFECTS = (
    Defect(
        "verl",
        ("gmpo", "gmpo_noclip"),
        "geo_mean averages over the micro-batch it is given",
        "compute_policy_loss_geo_mean ends in torch.mean over the micro-batch's sequences and ignores "
        "global_batch_info, while verl's engine sums the micro-batch losses without dividing: with k micro-batches "
        "per rank the update is k times the whole-batch update (the learning rate scales with the split).",
        "verl-project/verl#7913",
        "tests/verl/test_audit.py::test_upstream_geo_mean_scales_with_micro_batches",
    ),
    Defect(
        "verl",
        ("gmpo", "gmpo_noclip"),
        "geo_mean has no overflow guard: a finite float32 log ratio above 88.7 gives an infinite loss",
        "compute_policy_loss_geo_mean's clamp of the log ratio at +-20 is commented out (vanilla and gspo keep "
        "theirs); GMPO clips one side only, so a token with log ratio 89 and A < 0 reaches exp unbounded and the "
        "float32 loss is inf.",
        "not reported",
        "tests/verl/test_audit.py::test_upstream_geo_mean_no_overflow_guard_float32",
    ),
    Defect(
        "trl",
        ("grpo", "dapo", "dr_grpo", "gspo", "gmpo", "gmpo_noclip", "luspo", "sapo"),
        "no overflow guard: a finite float32 log ratio above 88.7 gives an infinite loss",
        "GRPOTrainer._compute_loss (every loss_type, token or sequence level) and GMPOTrainer's take exp of the "
        "log ratio as it is; in float32 a token with log ratio 89 and A < 0 (the unclipped side) makes the loss "
        "inf (sapo: a NaN gradient, the saturated gate times inf), where verl's vanilla, SkyRL and OpenRLHF's ppo clamp the log ratio at +-20 first.",
        "not reported",
        "tests/trl/test_audit.py::test_upstream_no_overflow_guard_float32",
    ),
    Defect(
        "liger",
        ("grpo", "dapo", "dr_grpo", "gspo", "luspo", "sapo"),
        "LigerFusedLinearGRPOLoss has no overflow guard: a finite float32 log ratio above 88.7 gives inf",
        "its ppo_loss_fn takes exp of the log ratio as it is (only its vespo path clamps); in float32 a token with "
        "log ratio 89 and A < 0 makes the loss inf and the gradient of the hidden state NaN.",
        "not reported",
        "tests/trl/test_audit.py::test_upstream_liger_no_overflow_guard_float32",
    ),
    Defect(
        "openrlhf",
        ("gspo",),
        "gspo has no overflow guard: a finite float32 log ratio above 88.7 gives an infinite loss",
        "PolicyLoss(policy_loss_type='gspo') takes exp of the mean log ratio as it is (its ppo branch clamps at "
        "+-20 first); in float32 a one-token sequence with log ratio 89 and A < 0 makes the loss inf.",
        "not reported",
        "tests/openrlhf/test_audit.py::test_upstream_gspo_no_overflow_guard_float32",
    ),
)
