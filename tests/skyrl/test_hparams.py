"""Where each hyper-parameter comes from, through SkyRL's own config and our entry point's
check: the field table's defaults are SkyRL's, the provenance line and the default warning
for gmpo with SkyRL's defaults (``loss_reduction=sequence_mean``, which gmpo requires), and
``GMPO_PLUGINS_LOSS_HPARAMS`` in the runtime env SkyRL's ``initialize_ray`` builds (a Ray
worker reads it: ``test_ray``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from skyrl.train.config import AlgorithmConfig, SkyRLTrainConfig

from gmpo_plugins.adapters import hparam_sources
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV, FrameworkDefaultWarning
from gmpo_plugins.adapters.skyrl import SkyRLConfigError
from gmpo_plugins.adapters.skyrl.entrypoint import check_config, forward_loss_hparams
from gmpo_plugins.adapters.skyrl.options import ALGORITHM, skyrl_fields
from gmpo_plugins.adapters.skyrl.releases import installed

SKYRL_GMPO_LINE = (
    "gmpo_plugins: SkyRL policy_loss_type=gmpo -> gmpo: eps_low=0.2 (framework default "
    "trainer.algorithm.eps_clip_low), eps_high=0.2 (framework default trainer.algorithm.eps_clip_high), kl_beta=0.0 "
    "(loss default), kl_estimator='k3' (loss default), kl_clamp=None (loss default), log_ratio_bound=20.0 (loss "
    "default), rollout_is_aggregation='geometric_mean' (loss default)"
)
GMPO = ["trainer.algorithm.policy_loss_type=gmpo", "trainer.algorithm.loss_reduction=sequence_mean"]
NO_WANDB = ["trainer.logger=console"]


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(hparam_sources, "_announced", set())
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)


def config(*overrides: str) -> SkyRLTrainConfig:
    return SkyRLTrainConfig.from_cli_overrides([*GMPO, *NO_WANDB, *overrides])


def test_field_table_defaults_are_skyrls():
    """The installed release's row of ``releases`` gives its field table SkyRL's defaults."""
    defaults = AlgorithmConfig()
    for row in skyrl_fields(installed()):
        value = defaults
        for part in row.name.removeprefix(f"{ALGORITHM}.").split("."):  # nested: sapo.tau_pos
            value = getattr(value, part)
        assert value == row.default, row.name


def test_gmpo_with_skyrls_defaults_logs_its_sources_and_warns(registered, caplog):
    with caplog.at_level(logging.INFO, logger="gmpo_plugins"), pytest.warns(FrameworkDefaultWarning) as warned:
        check_config(config())  # what our entry point does before SkyRL starts Ray
    lines = [r.getMessage() for r in caplog.records if r.name == "gmpo_plugins.hparams"]
    assert lines == [SKYRL_GMPO_LINE]
    (warning,) = [w for w in warned if w.category is FrameworkDefaultWarning]
    message = str(warning.message)
    assert message.startswith(
        "gmpo_plugins: SkyRL policy_loss_type=gmpo: eps_low=0.2 is SkyRL's default trainer.algorithm.eps_clip_low, "
        "while gmpo's own default is 0.4 (set trainer.algorithm.eps_clip_low, or "
        "GMPO_PLUGINS_LOSS_HPARAMS='{\"eps_low\": 0.4}')"
    )
    print(f"\nSkyRL provenance: {lines[0]}\nSkyRL warning: {message}")


def test_the_override_is_checked_with_skyrls_config_and_forwarded_to_ray(registered, monkeypatch):
    from skyrl.train.utils import utils

    value = json.dumps({"eps_low": 0.4, "eps_high": 0.4})
    monkeypatch.setenv(OVERRIDE_ENV, value)
    check_config(config())
    with pytest.raises(SkyRLConfigError, match=r"eps_high is set both by GMPO_PLUGINS_LOSS_HPARAMS \(0.4\) and by "):
        check_config(config("trainer.algorithm.eps_clip_high=0.3"))
    monkeypatch.setattr(utils, "prepare_runtime_environment", utils.prepare_runtime_environment)  # restored after
    forward_loss_hparams()
    forward_loss_hparams()  # idempotent
    env_vars = utils.prepare_runtime_environment(config())  # what SkyRL's initialize_ray passes to ray.init
    assert env_vars[OVERRIDE_ENV] == value


def test_doctor_prints_the_line_a_run_logs(registered, capsys):
    from gmpo_plugins.cli import main

    assert main(["doctor", "--framework", "skyrl", *GMPO]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == SKYRL_GMPO_LINE
    assert out[1].startswith("warning: gmpo_plugins: SkyRL policy_loss_type=gmpo: eps_low=0.2 is SkyRL's default")
    assert main(["doctor", "--framework", "skyrl", *GMPO, "trainer.algorithm.eps_clip_low=0.4"]) == 0
    assert "eps_low=0.4 (framework field trainer.algorithm.eps_clip_low)" in capsys.readouterr().out


def test_the_docs_show_the_line():
    page = (Path(__file__).parents[2] / "docs" / "integrations" / "skyrl.md").read_text()
    assert SKYRL_GMPO_LINE in page
