"""Where each hyper-parameter comes from, through GRPOConfig and RegistryGRPOTrainer: the
field table's defaults are TRL's, the provenance line and the default warning for gmpo with
TRL's defaults, and ``GMPO_PLUGINS_LOSS_HPARAMS`` beside GRPOConfig and ``loss_hparams``."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from trl import GRPOConfig

from gmpo_plugins import get_loss
from gmpo_plugins.adapters import hparam_sources
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV, FrameworkDefaultWarning, field_table
from gmpo_plugins.adapters.trl import RegistryGRPOTrainer, UnsupportedTRLOptionError, loss_hparams_from_args
from gmpo_plugins.adapters.trl.options import TRL_FIELDS

from .tiny import count_digits_reward, grpo_config

TRL_GMPO_LINE = (
    "gmpo_plugins: TRL RegistryGRPOTrainer(loss='gmpo') -> gmpo: eps_low=0.2 (framework default GRPOConfig.epsilon), "
    "eps_high=0.2 (framework default GRPOConfig.epsilon), kl_beta=0.0 (framework default GRPOConfig.beta), "
    "kl_estimator='k3' (loss default), kl_clamp=None (loss default), log_ratio_bound=20.0 (loss default), "
    "rollout_is_aggregation='geometric_mean' (loss default), entropy_coef=0.0 (framework default "
    "GRPOConfig.entropy_coef), top_entropy_quantile=1.0 (framework default GRPOConfig.top_entropy_quantile)"
)
TERMS_OFF = {"entropy_coef": 0.0, "top_entropy_quantile": 1.0}


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(hparam_sources, "_announced", set())
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)


def test_field_table_defaults_are_trls():
    defaults = {field.name: field.default for field in dataclasses.fields(GRPOConfig)}
    for row in TRL_FIELDS:
        assert defaults[row.name.removeprefix("GRPOConfig.")] == row.default, row.name


def test_gmpo_with_trls_defaults_logs_its_sources_and_warns(tmp_path, caplog):
    args = GRPOConfig(str(tmp_path), use_cpu=True, report_to="none")
    with caplog.at_level(logging.INFO, logger="gmpo_plugins"), pytest.warns(FrameworkDefaultWarning) as warned:
        assert loss_hparams_from_args(args, get_loss("gmpo")) == {
            "eps_low": 0.2,
            "eps_high": 0.2,
            "kl_beta": 0.0,
            **TERMS_OFF,
        }
        loss_hparams_from_args(args, get_loss("gmpo"))  # once per process
    lines = [r.getMessage() for r in caplog.records if r.name == "gmpo_plugins.hparams"]
    assert lines == [TRL_GMPO_LINE]
    (warning,) = [w for w in warned if w.category is FrameworkDefaultWarning]
    message = str(warning.message)
    assert message.startswith(
        "gmpo_plugins: TRL RegistryGRPOTrainer(loss='gmpo'): eps_low=0.2 is TRL's default GRPOConfig.epsilon, while "
        "gmpo's own default is 0.4 (set GRPOConfig.epsilon, or GMPO_PLUGINS_LOSS_HPARAMS='{\"eps_low\": 0.4}')"
    )
    print(f"\nTRL provenance: {lines[0]}\nTRL warning: {message}")


def test_the_override_reaches_the_trainer(model_dir, tmp_path, tokenizer, prompts, monkeypatch):
    monkeypatch.setenv(OVERRIDE_ENV, '{"eps_low": 0.4, "eps_high": 0.4, "log_ratio_bound": 10.0}')
    trainer = RegistryGRPOTrainer(
        model_dir, count_digits_reward, grpo_config(tmp_path), prompts, processing_class=tokenizer, loss="gmpo"
    )
    expected = {"eps_low": 0.4, "eps_high": 0.4, "kl_beta": 0.0, "log_ratio_bound": 10.0, **TERMS_OFF}
    assert trainer.loss_hparams == expected
    # a GRPOConfig field away from its default and the variable: an error naming both
    with pytest.raises(UnsupportedTRLOptionError) as info:
        loss_hparams_from_args(grpo_config(tmp_path, epsilon=0.3), get_loss("gmpo"))
    assert str(info.value) == (
        "gmpo_plugins: eps_low is set both by GMPO_PLUGINS_LOSS_HPARAMS (0.4) and by GRPOConfig.epsilon=0.3; "
        "set one of them"
    )
    # the variable and loss_hparams: set once
    with pytest.raises(UnsupportedTRLOptionError, match="log_ratio_bound is set by both GMPO_PLUGINS_LOSS_HPARAMS"):
        loss_hparams_from_args(grpo_config(tmp_path), get_loss("gmpo"), {"log_ratio_bound": 5.0})


def test_a_malformed_variable_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(OVERRIDE_ENV, "eps_low=0.4")
    with pytest.raises(UnsupportedTRLOptionError, match="^gmpo_plugins: GMPO_PLUGINS_LOSS_HPARAMS is not valid JSON"):
        loss_hparams_from_args(grpo_config(tmp_path), get_loss("gmpo"))


def test_doctor_prints_the_line_a_run_logs(capsys):
    from gmpo_plugins.cli import main

    assert main(["doctor", "--framework", "trl", "loss=gmpo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == TRL_GMPO_LINE
    assert out[1].startswith("warning: gmpo_plugins: TRL RegistryGRPOTrainer(loss='gmpo'): eps_low=0.2 is TRL's")
    assert main(["doctor", "--framework", "trl", "loss=gmpo", "epsilon=0.4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "eps_low=0.4 (framework field GRPOConfig.epsilon)" in out[0] and len(out) == 1


def test_the_docs_show_the_field_table_and_the_line():
    page = (Path(__file__).parents[2] / "docs" / "integrations" / "trl.md").read_text()
    assert field_table("trl") in page
    assert TRL_GMPO_LINE in page
