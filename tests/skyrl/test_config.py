"""Settings we cannot honour are refused at the first call, naming the SkyRL field."""

from __future__ import annotations

import pytest

from gmpo_plugins.adapters.skyrl import SkyRLConfigError

from .helpers import algorithm_config, make_batch


def _call(name: str, config, rollout: bool = False):
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    batch = make_batch()
    return PolicyLossRegistry.get(name)(
        batch["log_probs"].requires_grad_(True),
        batch["old_log_probs"],
        batch["advantages"],
        config=config,
        loss_mask=batch["loss_mask"],
        rollout_logprobs=batch["rollout_logprobs"] if rollout else None,
    )


@pytest.mark.parametrize(
    "name,fields,match",
    [
        ("gmpo", {"eps_clip_low": 0.0}, r"trainer\.algorithm\.eps_clip_low=0\.0 .*LOG-space bound"),
        ("gmpo", {"eps_clip_high": -0.4}, r"trainer\.algorithm\.eps_clip_high=-0\.4"),
        ("grpo", {"eps_clip_low": 1.2}, r"trainer\.algorithm\.eps_clip_low=1\.2 .*RATIO-space"),
    ],
)
def test_bad_eps_names_the_field(registered, name, fields, match):
    with pytest.raises(SkyRLConfigError, match=match):
        _call(name, algorithm_config(name, "sequence_mean", **fields))


@pytest.mark.parametrize(
    "name,reduction,match",
    [
        ("gmpo", "token_mean", r"sequence-level.*\['sequence_mean'\]"),
        ("gmpo_plugins.gspo", "seq_mean_token_sum_norm", r"\['sequence_mean'\]"),
        ("grpo", "prompt_mean", r"has no gmpo-plugins reduction"),
        ("grpo", "token_mean_legacy", r"has no gmpo-plugins reduction"),
        ("dapo", "sequence_mean", r"dapo is defined by its reduction 'token-mean'.*\['token_mean'\]"),
        ("dr_grpo", "token_mean", r"\['seq_mean_token_sum_norm'\]"),
    ],
)
def test_reductions_the_loss_cannot_express_are_refused(registered, name, reduction, match):
    with pytest.raises(SkyRLConfigError, match=rf"trainer\.algorithm\.loss_reduction='{reduction}' .*" + match):
        _call(name, algorithm_config(name, reduction))


def test_sum_norm_needs_max_seq_len(registered):
    with pytest.raises(SkyRLConfigError, match=r"trainer\.algorithm\.max_seq_len=None"):
        _call("dr_grpo", algorithm_config("dr_grpo", "seq_mean_token_sum_norm", max_seq_len=None))


@pytest.mark.parametrize(
    "field,value", [("sequence_mask_metric", "geometric"), ("outlier_token_is_threshold_high", 100.0)]
)
def test_off_policy_masking_is_refused(registered, field, value):
    from skyrl.train.config.config import OffPolicyCorrectionConfig

    correction = OffPolicyCorrectionConfig(**{field: value})
    config = algorithm_config("gmpo", "sequence_mean", off_policy_correction=correction)
    with pytest.raises(SkyRLConfigError, match=rf"off_policy_correction\.{field}={value!r}"):
        _call("gmpo", config, rollout=True)


def test_tis_without_rollout_logprobs_is_refused(registered):
    from skyrl.train.config.config import OffPolicyCorrectionConfig

    config = algorithm_config(
        "gmpo", "sequence_mean", off_policy_correction=OffPolicyCorrectionConfig(tis_ratio_type="token")
    )
    with pytest.raises(SkyRLConfigError, match=r"tis_ratio_type=token needs the rollout engine's log-probs"):
        _call("gmpo", config)


def test_unknown_loss_lists_ours(registered):
    """SkyRL's own lookup error (registry, and validate_cfg) lists our names."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    with pytest.raises(ValueError, match=r"Unknown policy loss 'gmpoo'") as info:
        PolicyLossRegistry.get("gmpoo")
    for name in ("gmpo", "gmpo_plugins.gmpo", "gmpo_plugins.gspo", "grpo", "dr_grpo", "regular"):
        assert repr(name) in str(info.value)
