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
        "inf (sapo: a NaN gradient, the saturated gate times inf), where verl's vanilla, SkyRL and OpenRLHF's "
        "ppo clamp the log ratio at +-20 first.",
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
    Defect(
        "verl",
        ("clip_cov", "kl_cov"),
        "clip_cov and kl_cov have no overflow guard: a finite float32 log ratio above 88.7 gives an infinite loss",
        "compute_policy_loss_clip_cov and compute_policy_loss_kl_cov take exp of the log ratio as it is (vanilla, "
        "cispo, sapo and dppo clamp it at +-20 first); in float32 a token with log ratio 89 and A < 0 makes the "
        "loss inf.",
        "not reported",
        "tests/verl/test_audit.py::test_upstream_covariance_losses_no_overflow_guard_float32",
    ),
    Defect(
        "trl",
        ("vespo",),
        "vespo zeroes a NaN weight: a NaN log-prob at a valid position gives a finite loss",
        "GRPOTrainer.get_gamma_weights ends in nan_to_num(nan=0, posinf=0, neginf=0), so a NaN old log-prob makes "
        "the sequence's weight 0 and its loss 0 with a zero gradient: the sequence silently trains nothing, where "
        "a non-finite input should surface.",
        "not reported",
        "tests/trl/test_audit.py::test_upstream_vespo_zeroes_a_nan_weight",
    ),
    Defect(
        "liger",
        ("vespo",),
        "vespo zeroes a NaN weight: a NaN log-prob at a valid position gives a finite loss",
        "its vespo weight is TRL's construction, nan_to_num included: a NaN old log-prob gives the weight 0 and "
        "the finite loss 0.",
        "not reported",
        "tests/trl/test_audit.py::test_upstream_liger_vespo_zeroes_a_nan_weight",
    ),
    Defect(
        "skyrl",
        ("kl_cov",),
        "kl_cov's penalty is summed where the reduction asks for a mean",
        "SkyRL reduces by pre-scaling the advantages (token_mean: A / valid tokens) and summing the loss; "
        "kl_cov's penalty ppo_kl_coef * |log r| carries no advantage, so it is summed over the restrained tokens, "
        "not averaged: with n valid tokens in the mini-batch it weighs n times what the method and verl give it.",
        "not reported",
        "tests/skyrl/test_audit.py::test_upstream_kl_cov_penalty_is_summed_not_averaged",
    ),
    Defect(
        "skyrl",
        ("clip_cov",),
        "clip_cov compares its covariance bounds with the covariance of the pre-scaled advantages",
        "the covariance (A - mean A)(log pi - mean log pi) is taken on the advantages SkyRL has already divided by "
        "the mini-batch's valid tokens, so clip_cov_lb / clip_cov_ub (1 and 5, set for the advantages as given) "
        "select other tokens, and past a few tokens none: clip_cov becomes PPO.",
        "not reported",
        "tests/skyrl/test_audit.py::test_upstream_clip_cov_bounds_see_scaled_advantages",
    ),
    Defect(
        "skyrl",
        ("clip_cov", "kl_cov"),
        "clip_cov and kl_cov have no overflow guard: a finite float32 log ratio above 88.7 gives an infinite loss",
        "compute_policy_loss_clip_cov and compute_policy_loss_kl_cov take exp of the log ratio as it is (regular, "
        "cispo, sapo and dppo clamp it at 20 first); in float32 a token with log ratio 89 and A < 0 makes the loss "
        "inf.",
        "not reported",
        "tests/skyrl/test_audit.py::test_upstream_covariance_losses_no_overflow_guard_float32",
    ),
)
