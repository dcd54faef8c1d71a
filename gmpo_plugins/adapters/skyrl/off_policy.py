"""SkyRL ``trainer.algorithm.off_policy_correction`` -> the core's rollout IS weights.

SkyRL corrects the mismatch between the rollout engine and the trainer with truncated
importance sampling (TIS) on ``ratio = exp(old_log_probs - rollout_logprobs)``:

    tis_ratio_type=token      w_t = min(ratio_t, token_tis_ratio_clip_high)            (B, T)
    tis_ratio_type=sequence   w_i = min(prod_t ratio_t, sequence_tis_ratio_clip_high)  (B,)

The weights are computed by SkyRL's own ``compute_tis_ratio`` (same numbers, same
``tis_*`` metrics) and passed to the core as ``LossInputs.rollout_is_weights``, where each
loss applies them (token-level losses per token, sequence-level losses per sequence). The
masking options (``sequence_mask_metric``, ``outlier_token_is_threshold_*``,
``token_mask_is_threshold_*``) drop tokens after SkyRL has normalised the advantages over
the unmasked ones; the core cannot reproduce that and they are refused.
"""

from __future__ import annotations

from typing import Any

import torch

from gmpo_plugins.adapters.skyrl.options import ALGORITHM, SkyRLConfigError

CORRECTION = f"{ALGORITHM}.off_policy_correction"
MASKING_FIELDS = (
    "sequence_mask_metric",
    "outlier_token_is_threshold_low",
    "outlier_token_is_threshold_high",
    "token_mask_is_threshold_low",
    "token_mask_is_threshold_high",
)


def rollout_is_weights(
    config: Any,
    old_log_probs: torch.Tensor,
    rollout_logprobs: torch.Tensor | None,
    loss_mask: torch.Tensor,
    policy_loss_type: str,
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """(IS weights (B, T) or (B,) or None, SkyRL's TIS metrics) for one micro-batch.

    Raises SkyRLConfigError naming the ``off_policy_correction`` field that cannot be
    honoured (masking), or when TIS is on but SkyRL passed no rollout log-probs.
    """
    correction = getattr(config, "off_policy_correction", None)
    if correction is None:
        return None, {}
    for name in MASKING_FIELDS:
        value = getattr(correction, name, None)
        if value is not None:
            raise SkyRLConfigError(
                f"gmpo_plugins: {CORRECTION}.{name}={value!r} is not supported by policy_loss_type="
                f"{policy_loss_type}: it masks tokens after SkyRL normalised the advantages over them, which "
                f"the gmpo-plugins losses cannot reproduce. Set {CORRECTION}.{name}=null; truncated IS "
                f"({CORRECTION}.tis_ratio_type=token or sequence) is supported."
            )
    kind = getattr(correction, "tis_ratio_type", None)
    if kind is None:
        return None, {}
    if kind not in ("token", "sequence"):
        raise SkyRLConfigError(
            f"gmpo_plugins: {CORRECTION}.tis_ratio_type={kind!r}: expected null, 'token' or 'sequence'"
        )
    if rollout_logprobs is None:
        raise SkyRLConfigError(
            f"gmpo_plugins: {CORRECTION}.tis_ratio_type={kind} needs the rollout engine's log-probs, but SkyRL "
            f"passed none to policy_loss_type={policy_loss_type}: set generator.sampling_params.logprobs, "
            f"or {CORRECTION}.tis_ratio_type=null"
        )
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import compute_tis_ratio

    weights, metrics = compute_tis_ratio(old_log_probs, rollout_logprobs, loss_mask, kind, correction)
    return (weights.squeeze(-1) if kind == "sequence" else weights), metrics
