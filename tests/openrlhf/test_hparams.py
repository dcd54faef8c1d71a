"""Where each hyper-parameter comes from, through ``gmpo-openrlhf``'s parsing and OpenRLHF's
PolicyLoss: the flag table's defaults are OpenRLHF's, the provenance line and the default
warning for gmpo with OpenRLHF's defaults, and ``GMPO_PLUGINS_LOSS_HPARAMS`` in the Ray
runtime env that ``gmpo-openrlhf`` hands to ``ray.init`` (a Ray worker reads it:
``test_ray``)."""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path

import pytest

from gmpo_plugins.adapters import hparam_sources
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV, FrameworkDefaultWarning
from gmpo_plugins.adapters.openrlhf.cli import parse_args, train_args
from gmpo_plugins.adapters.openrlhf.options import OPENRLHF_FIELDS
from tests.openrlhf.test_cli import GROUP, record_ray_init

OPENRLHF_GMPO_LINE = (
    "gmpo_plugins: OpenRLHF --actor.policy_loss_type=gmpo -> gmpo: eps_low=0.2 (framework default "
    "--actor.eps_clip_low_high (LOW)), eps_high=0.2 (framework default --actor.eps_clip_low_high (HIGH)), "
    "kl_beta=0.0 (loss default), kl_estimator='k3' (loss default), kl_clamp=None (loss default), "
    "log_ratio_bound=20.0 (loss default), rollout_is_aggregation='geometric_mean' (loss default)"
)


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(hparam_sources, "_announced", set())
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)


def test_flag_table_defaults_are_openrlhfs(loss_module):
    args = train_args(["--actor.policy_loss_type", "gmpo", *GROUP])  # as train(args) receives them
    low, high = args.actor.eps_clip_low_high  # as ActorPPOTrainer reads them
    parsed = {"eps_low": low, "eps_high": high, "dual_clip": args.actor.dual_clip}
    parsed["reduction"] = args.actor.loss_agg_mode
    assert {row.hparam: row.default for row in OPENRLHF_FIELDS} == parsed
    signature = inspect.signature(loss_module.PolicyLoss.__init__).parameters
    assert (signature["clip_eps_low"].default, signature["dual_clip"].default) == (0.2, None)


def test_gmpo_with_openrlhfs_defaults_logs_its_sources_and_warns(loss_module, caplog):
    with caplog.at_level(logging.INFO, logger="gmpo_plugins"), pytest.warns(FrameworkDefaultWarning) as warned:
        parse_args(["--actor.policy_loss_type", "gmpo", *GROUP])  # builds a PolicyLoss, as ActorPPOTrainer does
        loss_module.PolicyLoss(policy_loss_type="gmpo")  # once per process
    lines = [r.getMessage() for r in caplog.records if r.name == "gmpo_plugins.hparams"]
    assert lines == [OPENRLHF_GMPO_LINE]
    (warning,) = [w for w in warned if w.category is FrameworkDefaultWarning]
    message = str(warning.message)
    assert message.startswith(
        "gmpo_plugins: OpenRLHF --actor.policy_loss_type=gmpo: eps_low=0.2 is OpenRLHF's default "
        "--actor.eps_clip_low_high (LOW), while gmpo's own default is 0.4 (set --actor.eps_clip_low_high (LOW), "
        "or GMPO_PLUGINS_LOSS_HPARAMS='{\"eps_low\": 0.4}')"
    )
    print(f"\nOpenRLHF provenance: {lines[0]}\nOpenRLHF warning: {message}")


def test_the_override_reaches_policy_loss_and_rays_runtime_env(loss_module, monkeypatch, capsys):
    value = json.dumps({"eps_low": 0.4, "eps_high": 0.4, "kl_estimator": "k2"})
    monkeypatch.setenv(OVERRIDE_ENV, value)
    plan = loss_module.PolicyLoss(policy_loss_type="gmpo").__dict__["_gmpo_plugins_plan"]
    assert dict(plan.hparams) == {"eps_low": 0.4, "eps_high": 0.4, "kl_estimator": "k2"}
    seen = record_ray_init(monkeypatch, ["--actor.policy_loss_type", "gmpo", *GROUP])
    assert seen["runtime_env"]["env_vars"][OVERRIDE_ENV] == value
    # the override and a flag away from its default: a usage error naming both
    with pytest.raises(SystemExit) as exc:
        parse_args(["--actor.policy_loss_type", "gmpo", "--actor.eps_clip", "0.3", *GROUP])
    assert exc.value.code == 2
    assert (
        "eps_low is set both by GMPO_PLUGINS_LOSS_HPARAMS (0.4) and by --actor.eps_clip_low_high (LOW)=0.3"
        in capsys.readouterr().err
    )


def test_doctor_prints_the_line_a_run_logs(loss_module, capsys):
    from gmpo_plugins.cli import main

    assert main(["doctor", "--framework", "openrlhf", "--", "--actor.policy_loss_type", "gmpo", *GROUP]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == OPENRLHF_GMPO_LINE
    assert out[1].startswith("warning: gmpo_plugins: OpenRLHF --actor.policy_loss_type=gmpo: eps_low=0.2 is")
    assert main(["doctor", "--framework", "openrlhf", "--", "--actor.policy_loss_type", "ppo"]) == 0
    assert "the framework's own loss" in capsys.readouterr().out


def test_the_docs_show_the_line():
    page = (Path(__file__).parents[2] / "docs" / "integrations" / "openrlhf.md").read_text()
    assert OPENRLHF_GMPO_LINE in page
