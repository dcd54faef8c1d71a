"""Options our losses cannot honour are refused at construction, with a message naming
the option, before the model is loaded (the model path below does not exist)."""

from __future__ import annotations

import pytest

from gmpo_plugins import UnknownLossError, get_loss
from gmpo_plugins.adapters.trl import RegistryGRPOTrainer, UnsupportedTRLOptionError, loss_hparams_from_args
from gmpo_plugins.adapters.trl.options import refusals

from .tiny import count_digits_reward, grpo_config

MISSING_MODEL = "/nonexistent/model"
TERMS_OFF = {"entropy_coef": 0.0, "top_entropy_quantile": 1.0}
"""GRPOConfig's defaults of the loss terms' fields, which every loss receives (off)."""


def _build(tmp_path, loss="gmpo", loss_hparams=None, **config):
    return RegistryGRPOTrainer(
        model=MISSING_MODEL,
        reward_funcs=count_digits_reward,
        args=grpo_config(tmp_path, **config),
        loss=loss,
        loss_hparams=loss_hparams,
    )


@pytest.mark.parametrize(
    "config,option",
    [
        ({"loss_type": "grpo"}, "loss_type='grpo'"),
        ({"loss_type": "cispo"}, "loss_type='cispo'"),
        ({"importance_sampling_level": "sequence"}, "importance_sampling_level='sequence'"),
        ({"delta": 2.0}, "delta=2.0"),
        ({"off_policy_mask_threshold": 0.5}, "off_policy_mask_threshold=0.5"),
        ({"use_adaptive_entropy": True}, "use_adaptive_entropy=True"),
        ({"beta": 0.04}, "use_bias_correction_kl=True"),  # GRPOConfig's default with a KL term
    ],
)
def test_refused_option_is_named(tmp_path, config, option):
    with pytest.raises(UnsupportedTRLOptionError, match="cannot honour") as info:
        _build(tmp_path, **config)
    assert option in str(info.value)


def test_every_refused_option_is_listed_at_once(tmp_path):
    with pytest.raises(UnsupportedTRLOptionError) as info:
        _build(tmp_path, loss_type="bnpo", off_policy_mask_threshold=0.5, delta=3.0)
    message = str(info.value)
    assert all(name in message for name in ("loss_type='bnpo'", "off_policy_mask_threshold=0.5", "delta=3.0"))


def test_epsilon_high_refused_for_a_loss_without_clip(tmp_path):
    with pytest.raises(UnsupportedTRLOptionError, match=r"epsilon_high=0\.3: loss 'gmpo_noclip' has no clip range"):
        _build(tmp_path, loss="gmpo_noclip", epsilon_high=0.3)


@pytest.mark.parametrize(
    "key,field",
    [
        ("eps_low", "epsilon"),
        ("eps_high", "epsilon_high"),
        ("kl_beta", "beta"),
        ("norm_length", "max_completion_length"),
    ],
)
def test_translated_hyper_parameters_come_from_grpo_config(tmp_path, key, field):
    loss = "dr_grpo" if key == "norm_length" else "gmpo"  # a loss that declares the hyper-parameter
    with pytest.raises(UnsupportedTRLOptionError, match=rf"loss_hparams\['{key}'\]: set GRPOConfig.{field} instead"):
        _build(tmp_path, loss=loss, loss_hparams={key: 0.1})


def test_unknown_loss_lists_the_valid_names(tmp_path):
    with pytest.raises(UnknownLossError) as info:
        _build(tmp_path, loss="gmpoo")
    message = str(info.value)
    assert "unknown loss 'gmpoo'" in message and "did you mean 'gmpo'?" in message
    assert all(name in message for name in ("gmpo", "grpo", "dapo", "dr_grpo", "gspo", "gmpo_noclip"))


def test_unknown_or_bad_loss_hparams_raise_at_construction(tmp_path):
    with pytest.raises(TypeError, match=r"unknown hyper-parameter\(s\) \['log_ratio_bond'\].*log_ratio_bound"):
        _build(tmp_path, loss_hparams={"log_ratio_bond": 10.0})
    with pytest.raises(ValueError, match="log_ratio_bound must be a finite number > 0"):
        _build(tmp_path, loss_hparams={"log_ratio_bound": -1.0})
    with pytest.raises(ValueError, match="eps_low must be a finite number > 0") as info:
        _build(tmp_path, epsilon=-0.1)
    assert "GRPOConfig.epsilon=-0.1 is not valid for RegistryGRPOTrainer(loss='gmpo')" in str(info.value)
    assert "LOG-space bound" in str(info.value)


def test_supported_options_are_translated(tmp_path):
    """vLLM IS correction, a KL term without bias correction, GMPOConfig's eps: accepted and
    passed on (values a plain GRPOConfig default would not give)."""
    from trl.experimental.gmpo import GMPOConfig

    args = grpo_config(
        tmp_path,
        use_vllm=True,
        vllm_importance_sampling_correction=True,
        beta=0.04,
        use_bias_correction_kl=False,
        epsilon_high=0.3,
    )
    assert refusals(args, get_loss("gmpo")) == []
    assert loss_hparams_from_args(args, get_loss("gmpo"), {"log_ratio_bound": 10.0}) == {
        "eps_low": 0.2,
        "eps_high": 0.3,
        "kl_beta": 0.04,
        "log_ratio_bound": 10.0,
        **TERMS_OFF,
    }
    assert loss_hparams_from_args(args, get_loss("dr_grpo")) == {
        "eps_low": 0.2,
        "eps_high": 0.3,
        "kl_beta": 0.04,
        "norm_length": 8,
        **TERMS_OFF,
    }
    assert loss_hparams_from_args(grpo_config(tmp_path, GMPOConfig), get_loss("gmpo")) == {
        "eps_low": 0.4,
        "eps_high": 0.4,
        "kl_beta": 0.0,
        **TERMS_OFF,
    }
    assert loss_hparams_from_args(grpo_config(tmp_path), get_loss("gmpo_noclip")) == {"kl_beta": 0.0, **TERMS_OFF}
