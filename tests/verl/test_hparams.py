"""Where each hyper-parameter comes from, through verl's own config and ``ppo_loss``: the
field table's defaults are verl's, ``GMPO_PLUGINS_LOSS_HPARAMS`` reaches the loss with
verl's defaults in place (and conflicts with a field set away from its default), and the
variable reaches Ray workers (inherited on a cluster the driver starts, and through verl's
``ray_kwargs.ray_init.runtime_env`` on any cluster)."""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
from verl.workers.utils.losses import ppo_loss

from gmpo_plugins.adapters import hparam_sources
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV, FrameworkDefaultWarning, field_table
from gmpo_plugins.adapters.verl import VerlConfigError, options

from . import engine
from .releases import RELEASE

VERL_GMPO_LINE = (
    "gmpo_plugins: verl loss_mode=gmpo -> gmpo: eps_low=0.2 (framework default "
    "actor_rollout_ref.actor.clip_ratio_low), eps_high=0.2 (framework default "
    "actor_rollout_ref.actor.clip_ratio_high), kl_beta=0.0 (loss default), "
    "kl_estimator='k3' (loss default), kl_clamp=None (loss default), log_ratio_bound=20.0 (loss default), "
    "rollout_is_aggregation='geometric_mean' (loss default)"
)


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(hparam_sources, "_announced", set())
    monkeypatch.setattr(options, "_warned", set())
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)


@pytest.fixture(scope="module")
def micro_batch(rollout):
    return engine.engine_batch(rollout.td)


def _loss(model, config, micro_batch) -> float:
    return float(ppo_loss(config, engine.forward(model, micro_batch), micro_batch, dp_group=None)[0].detach())


def test_field_table_defaults_are_verls(actor_config):
    config = actor_config("vanilla")  # verl's own defaults, composed from ppo_trainer.yaml
    for row in options.VERL_FIELDS:
        value = config
        for part in row.name.removeprefix(f"{options.ACTOR}.").split("."):  # nested: policy_loss.dro_beta
            value = getattr(value, part)
        assert value == row.default, row.name


def test_gmpo_with_verls_defaults_logs_its_sources_and_warns(model, actor_config, micro_batch, caplog):
    config = actor_config("gmpo")
    with caplog.at_level(logging.INFO, logger="gmpo_plugins"), pytest.warns(FrameworkDefaultWarning) as warned:
        _loss(model, config, micro_batch)
        _loss(model, config, micro_batch)  # once per process
    lines = [r.getMessage() for r in caplog.records if r.name == "gmpo_plugins.hparams"]
    assert lines == [VERL_GMPO_LINE]
    (warning,) = [w for w in warned if w.category is FrameworkDefaultWarning]
    message = str(warning.message)
    assert message.startswith(
        "gmpo_plugins: verl loss_mode=gmpo: eps_low=0.2 is verl's default actor_rollout_ref.actor.clip_ratio_low, "
        "while gmpo's own default is 0.4 (set actor_rollout_ref.actor.clip_ratio_low, or "
        "GMPO_PLUGINS_LOSS_HPARAMS='{\"eps_low\": 0.4}')"
    )
    print(f"\nverl provenance: {lines[0]}\nverl warning: {message}")


def test_the_override_reaches_the_loss_through_verls_config(model, actor_config, micro_batch, monkeypatch):
    fields = {"loss_agg_mode": "seq-mean-token-mean"}
    in_fields = _loss(model, actor_config("gmpo", clip_ratio_low=0.1, clip_ratio_high=0.1, **fields), micro_batch)
    at_default = _loss(model, actor_config("gmpo", **fields), micro_batch)
    monkeypatch.setenv(OVERRIDE_ENV, json.dumps({"eps_low": 0.1, "eps_high": 0.1}))
    overridden = _loss(model, actor_config("gmpo", **fields), micro_batch)
    assert overridden == in_fields != at_default  # the 0.1 band clips where the 0.2 one does not
    with pytest.raises(VerlConfigError) as info:
        _loss(model, actor_config("gmpo", clip_ratio_low=0.3, **fields), micro_batch)
    assert str(info.value) == (
        "gmpo_plugins: eps_low is set both by GMPO_PLUGINS_LOSS_HPARAMS (0.1) and by "
        "actor_rollout_ref.actor.clip_ratio_low=0.3; set one of them"
    )


def test_verls_runtime_env_override_carries_the_json():
    """The override for a cluster verl's driver does not start: verl's main_ppo merges
    ``ray_kwargs.ray_init.runtime_env`` into its default runtime env (as below)."""
    value = '{"eps_low": 0.4, "eps_high": 0.4}'
    override = f"+ray_kwargs.ray_init.runtime_env.env_vars.{OVERRIDE_ENV}='{value}'"
    with initialize_config_dir(config_dir=engine.VERL_CONFIG_DIR, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[override])
    runtime_env = config.ray_kwargs.get("ray_init", {}).get("runtime_env", {})
    # verl 0.9's main_ppo passes the config to get_ppo_ray_runtime_env; 0.8's takes no argument
    default = get_ppo_ray_runtime_env(*([config] if inspect.signature(get_ppo_ray_runtime_env).parameters else []))
    merged = OmegaConf.to_container(OmegaConf.merge(default, runtime_env))
    assert json.loads(merged["env_vars"][OVERRIDE_ENV]) == {"eps_low": 0.4, "eps_high": 0.4}


@pytest.mark.ray
def test_ray_workers_read_the_override(monkeypatch):
    """A Ray cluster started by the driver (as verl's main_ppo does): a worker inherits the
    driver's variable; an actor whose runtime env sets it (verl's runtime_env override)
    reads that value. Each calls verl's registered loss and reports the provenance."""
    ray = pytest.importorskip("ray")
    monkeypatch.setenv(OVERRIDE_ENV, '{"eps_low": 0.4, "eps_high": 0.4}')

    @ray.remote(num_cpus=1)
    def provenance():
        import verl  # noqa: F401 - registers our losses
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        from gmpo_plugins import get_loss
        from gmpo_plugins.adapters.verl.options import resolution_from_config

        assert get_policy_loss_fn("gmpo").__gmpo_plugins_loss__ == "gmpo"
        actor = SimpleNamespace(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0)
        resolution = resolution_from_config(get_loss("gmpo"), actor, "seq-mean-token-mean", "gmpo")
        return os.getpid(), resolution.params()

    temp_dir = tempfile.mkdtemp(prefix="ray_verl_", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir)
    try:
        inherited = ray.get(provenance.remote(), timeout=240)
        env = {"env_vars": {OVERRIDE_ENV: '{"eps_low": 0.3, "eps_high": 0.3}'}}
        forwarded = ray.get(provenance.options(runtime_env=env).remote(), timeout=240)
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert inherited[0] != os.getpid() and forwarded[0] != os.getpid()
    assert inherited[1] == {"eps_low": 0.4, "eps_high": 0.4}
    assert forwarded[1] == {"eps_low": 0.3, "eps_high": 0.3}


def test_doctor_prints_the_line_a_run_logs(capsys, monkeypatch):
    from gmpo_plugins.cli import main

    assert main(["doctor", "--framework", "verl", f"{options.ACTOR}.policy_loss.loss_mode=gmpo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == VERL_GMPO_LINE
    assert out[1].startswith("warning: gmpo_plugins: verl loss_mode=gmpo: eps_low=0.2 is verl's default")
    monkeypatch.setenv(OVERRIDE_ENV, '{"eps_low": 0.4, "eps_high": 0.4}')
    assert main(["doctor", "--framework", "verl", f"{options.ACTOR}.policy_loss.loss_mode=gmpo", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["hparams"][:2] == [
        {"name": "eps_low", "value": 0.4, "source": "override GMPO_PLUGINS_LOSS_HPARAMS"},
        {"name": "eps_high", "value": 0.4, "source": "override GMPO_PLUGINS_LOSS_HPARAMS"},
    ]
    assert result["warning"] is None
    assert main(["doctor", "--framework", "verl", f"{options.ACTOR}.policy_loss.loss_mode=vanilla"]) == 0
    assert (
        capsys.readouterr().out
        == "verl loss_mode=vanilla: the framework's own loss (no gmpo-plugins hyper-parameters)\n"
    )
    assert (
        main(
            [
                "doctor",
                "--framework",
                "verl",
                f"{options.ACTOR}.policy_loss.loss_mode=gmpo",
                f"{options.ACTOR}.clip_ratio_low=0.3",
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.startswith(
        "gmpo-plugins doctor: error: verl: VerlConfigError: gmpo_plugins: eps_low is set both by "
        "GMPO_PLUGINS_LOSS_HPARAMS"
    )


def test_the_docs_show_the_field_table_and_the_line():
    """The page shows verl 0.9's table; verl 0.8's is the same less the policy_loss.dro_beta row."""
    page = (Path(__file__).parents[2] / "docs" / "integrations" / "verl.md").read_text()
    if RELEASE.dro_beta:
        assert field_table("verl") in page
    else:
        start = page.index("| setting | feeds | setting's default |")
        shown = page[start : page.index("\n\n", start)].splitlines()
        dro_beta = "| `actor_rollout_ref.actor.policy_loss.dro_beta` | `dro_beta` | `None` | not null | yes |"
        assert dro_beta in shown
        assert "\n".join(line for line in shown if line != dro_beta) == field_table("verl")
    assert VERL_GMPO_LINE in page
