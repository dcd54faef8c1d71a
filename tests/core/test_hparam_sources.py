"""Where each hyper-parameter comes from (``adapters.hparam_sources``): precedence override >
framework field > loss default, "framework default" for a field at its default, the
conflict and bad-override errors, the provenance line and the default warning, once per
process and on rank 0 only. Through the OpenRLHF and SkyRL option modules, which import no
framework."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from gmpo_plugins import get_loss
from gmpo_plugins.adapters import hparam_sources
from gmpo_plugins.adapters.hparam_sources import (
    OVERRIDE_ENV,
    Field,
    FrameworkDefaultWarning,
    announce,
    attribute,
    forward_override,
    resolve,
)
from gmpo_plugins.adapters.openrlhf.options import OpenRLHFConfigError, loss_resolution, plan_loss
from gmpo_plugins.adapters.skyrl.options import SkyRLConfigError, resolution_from_config


class FwError(ValueError):
    pass


TABLE = (
    Field("eps_low", "fw.clip_low", 0.2, attribute("clip_low", none_absent=True)),
    Field("eps_low", "fw.clip", 0.2, attribute("clip")),
    Field("eps_high", "fw.clip_high", 0.2, attribute("clip_high")),
    Field("kl_beta", "fw.beta", 0.0, attribute("beta")),
)


def fw(**fields):
    config = SimpleNamespace(clip_low=0.2, clip=0.2, clip_high=0.2, beta=0.0)
    for key, value in fields.items():
        setattr(config, key, value)
    return config


def run(config, loss="gmpo", **override):
    return resolve(
        get_loss(loss), TABLE, config, framework="fw", selector=f"loss={loss}", error=FwError, overrides=override
    )


def sources(resolution):
    return {item.hparam: (item.value, item.source) for item in resolution.items}


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(hparam_sources, "_announced", set())
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)


def test_every_hparam_carries_its_source_in_precedence_order():
    got = sources(run(fw(clip_high=0.3), channel={"log_ratio_bound": 10.0, "eps_low": 0.4}))
    assert got == {
        "eps_low": (0.4, "override channel"),  # the field is at its default: the override wins
        "eps_high": (0.3, "framework field fw.clip_high"),  # 0.3 != the field's default 0.2
        "kl_beta": (0.0, "framework default fw.beta"),
        "kl_estimator": ("k3", "loss default"),
        "kl_clamp": (None, "loss default"),
        "log_ratio_bound": (10.0, "override channel"),
        "rollout_is_aggregation": ("geometric_mean", "loss default"),
    }
    # the loss is called with everything not at the loss default
    assert run(fw(clip_high=0.3), channel={"eps_low": 0.4}).params() == {
        "eps_low": 0.4,
        "eps_high": 0.3,
        "kl_beta": 0.0,
    }


def test_rows_for_one_hparam_are_tried_in_order():
    assert sources(run(fw(clip_low=None, clip=0.25)))["eps_low"] == (0.25, "framework field fw.clip")
    assert sources(run(fw(clip_low=0.3, clip=0.25)))["eps_low"] == (0.3, "framework field fw.clip_low")
    # a hyper-parameter the loss does not declare is not fed: gmpo_noclip has no clip range
    assert "eps_low" not in sources(run(fw(clip_low=0.3), loss="gmpo_noclip"))


def test_override_and_non_default_field_is_an_error_naming_both():
    with pytest.raises(FwError) as info:
        run(fw(clip_high=0.3), channel={"eps_high": 0.4})
    assert str(info.value) == (
        "gmpo_plugins: eps_high is set both by channel (0.4) and by fw.clip_high=0.3; set one of them"
    )


def test_an_override_that_is_unknown_or_out_of_range_names_the_channel():
    with pytest.raises(FwError) as info:
        run(fw(), channel={"eps_lo": 0.4})
    message = str(info.value)
    assert message.startswith("gmpo_plugins: channel={\"eps_lo\": 0.4}: gmpo: unknown hyper-parameter(s) ['eps_lo']")
    assert "(did you mean 'eps_low' for 'eps_lo'?)" in message
    with pytest.raises(FwError, match=r"channel=\{\"eps_low\": -1\}: gmpo: eps_low must be a finite number > 0"):
        run(fw(), channel={"eps_low": -1})
    with pytest.raises(FwError, match="set by both one and two; set it once"):
        run(fw(), one={"kl_beta": 0.1}, two={"kl_beta": 0.1})


def test_a_field_value_out_of_range_names_the_field():
    with pytest.raises(FwError, match=r"fw.clip_high=-0.1 is not valid for loss=gmpo: .*LOG-space bound"):
        run(fw(clip_high=-0.1))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{eps_low: 0.4}", "gmpo_plugins: GMPO_PLUGINS_LOSS_HPARAMS is not valid JSON (Expecting property name"),
        ("[0.4]", "gmpo_plugins: GMPO_PLUGINS_LOSS_HPARAMS must be a JSON object {hparam: value}, got list: '[0.4]'"),
    ],
)
def test_a_malformed_variable_is_one_line_naming_it(monkeypatch, raw, message):
    monkeypatch.setenv(OVERRIDE_ENV, raw)
    with pytest.raises(FwError) as info:
        resolve(get_loss("gmpo"), TABLE, fw(), framework="fw", selector="loss=gmpo", error=FwError)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_the_variable_is_read_when_no_channel_is_given(monkeypatch):
    monkeypatch.setenv(OVERRIDE_ENV, json.dumps({"eps_low": 0.4, "eps_high": 0.4}))
    resolution = resolve(get_loss("gmpo"), TABLE, fw(), framework="fw", selector="loss=gmpo", error=FwError)
    assert sources(resolution)["eps_high"] == (0.4, "override GMPO_PLUGINS_LOSS_HPARAMS")
    assert resolution.default_warning() is None


def test_provenance_line_and_default_warning_once_per_process(caplog):
    resolution = run(fw())
    assert resolution.line() == (
        "gmpo_plugins: fw loss=gmpo -> gmpo: eps_low=0.2 (framework default fw.clip_low), eps_high=0.2 (framework "
        "default fw.clip_high), kl_beta=0.0 (framework default fw.beta), kl_estimator='k3' (loss default), "
        "kl_clamp=None (loss default), log_ratio_bound=20.0 (loss default), rollout_is_aggregation='geometric_mean' "
        "(loss default)"
    )
    with caplog.at_level(logging.INFO, logger="gmpo_plugins"), pytest.warns(FrameworkDefaultWarning) as warned:
        announce(resolution)
        announce(run(fw()))  # the same selector again: nothing
    assert [record.getMessage() for record in caplog.records] == [resolution.line()]
    (warning,) = warned
    assert str(warning.message) == (
        "gmpo_plugins: fw loss=gmpo: eps_low=0.2 is fw's default fw.clip_low, while gmpo's own default is 0.4 "
        "(set fw.clip_low, or GMPO_PLUGINS_LOSS_HPARAMS='{\"eps_low\": 0.4}'); eps_high=0.2 is fw's default "
        "fw.clip_high, while gmpo's own default is 0.4 (set fw.clip_high, or "
        "GMPO_PLUGINS_LOSS_HPARAMS='{\"eps_high\": 0.4}'). To keep a framework default, pass it as "
        'GMPO_PLUGINS_LOSS_HPARAMS=\'{"eps_low": 0.2, "eps_high": 0.2}\' (a field set to its default cannot be '
        "told from it)"
    )


def test_gspo_paper_bounds_and_no_warning_when_set(caplog):
    message = run(fw(), loss="gspo").default_warning()
    assert "eps_low=0.2 is fw's default fw.clip_low, while gspo's own default is 0.0003" in message
    assert "eps_high=0.2 is fw's default fw.clip_high, while gspo's own default is 0.0004" in message
    # kl_beta 0.0 from the framework's default equals the loss's: not mentioned
    assert "kl_beta" not in message
    assert run(fw(clip_low=3e-4, clip_high=4e-4), loss="gspo").default_warning() is None


def test_ranks_other_than_zero_stay_silent(monkeypatch, caplog):
    monkeypatch.setenv("RANK", "1")
    with caplog.at_level(logging.INFO, logger="gmpo_plugins"), warnings.catch_warnings():
        warnings.simplefilter("error")
        announce(run(fw()))
    assert not caplog.records


def test_forward_override_adds_the_drivers_variable(monkeypatch):
    assert forward_override({"A": "1"}) == {"A": "1"}
    monkeypatch.setenv(OVERRIDE_ENV, '{"eps_low": 0.4}')
    assert forward_override({"A": "1"}) == {"A": "1", OVERRIDE_ENV: '{"eps_low": 0.4}'}
    assert forward_override(None) == {OVERRIDE_ENV: '{"eps_low": 0.4}'}
    assert forward_override({OVERRIDE_ENV: "{}"}) == {OVERRIDE_ENV: "{}"}  # an explicit entry wins


def test_make_visible_prints_info_when_nothing_else_would(monkeypatch):
    package = logging.getLogger("gmpo_plugins")
    monkeypatch.setattr(package, "level", logging.NOTSET)
    monkeypatch.setattr(package, "handlers", [])
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    hparam_sources.make_visible()
    assert package.level == logging.INFO and len(package.handlers) == 1
    monkeypatch.setattr(package, "handlers", [])
    monkeypatch.setattr(package, "level", logging.WARNING)  # configured by the user: left alone
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])
    hparam_sources.make_visible()
    assert package.level == logging.WARNING and package.handlers == []


OPENRLHF_DEFAULTS = {"clip_eps_low": 0.2, "clip_eps_high": 0.2, "dual_clip": None, "token_level_loss": True}


def test_openrlhf_flags_and_the_override(monkeypatch):
    resolution = loss_resolution("gmpo_plugins.grpo", **OPENRLHF_DEFAULTS)
    assert sources(resolution)["reduction"] == ("token-mean", "framework default --actor.loss_agg_mode")
    assert sources(resolution)["eps_high"] == (0.2, "framework default --actor.eps_clip_low_high (HIGH)")
    monkeypatch.setenv(OVERRIDE_ENV, '{"eps_low": 0.4, "eps_high": 0.4, "kl_beta": 0.05}')
    plan = plan_loss("gmpo", **OPENRLHF_DEFAULTS)
    assert dict(plan.hparams) == {"eps_low": 0.4, "eps_high": 0.4, "kl_beta": 0.05}
    with pytest.raises(OpenRLHFConfigError, match=r"eps_low is set both by GMPO_PLUGINS_LOSS_HPARAMS \(0.4\) and by "):
        plan_loss("gmpo", **{**OPENRLHF_DEFAULTS, "clip_eps_low": 0.3})


def skyrl_config(**fields):
    base = {"eps_clip_low": 0.2, "eps_clip_high": 0.2, "loss_reduction": "sequence_mean", "max_seq_len": None}
    return SimpleNamespace(**{**base, **fields})


def test_skyrl_fields_and_the_override(monkeypatch):
    got = sources(resolution_from_config(get_loss("gmpo"), skyrl_config(), "gmpo"))
    assert got["eps_low"] == (0.2, "framework default trainer.algorithm.eps_clip_low")
    grpo = sources(resolution_from_config(get_loss("grpo"), skyrl_config(), "grpo"))
    assert grpo["reduction"] == ("seq-mean-token-mean", "framework field trainer.algorithm.loss_reduction")
    # SkyRL scales the advantages by loss_reduction: an override may only agree with it
    monkeypatch.setenv(OVERRIDE_ENV, '{"reduction": "seq-mean-token-mean"}')
    agreed = sources(resolution_from_config(get_loss("grpo"), skyrl_config(), "grpo"))
    assert agreed["reduction"] == ("seq-mean-token-mean", "override GMPO_PLUGINS_LOSS_HPARAMS")
    monkeypatch.setenv(OVERRIDE_ENV, '{"reduction": "token-mean"}')
    with pytest.raises(SkyRLConfigError, match="SkyRL uses trainer.algorithm.loss_reduction beyond the loss"):
        resolution_from_config(get_loss("grpo"), skyrl_config(), "grpo")


@pytest.mark.parametrize("framework", ["openrlhf", "skyrl"])  # verl's and TRL's: in their sessions
def test_the_integration_pages_show_the_field_tables(framework):
    page = (Path(__file__).parents[2] / "docs" / "integrations" / f"{framework}.md").read_text()
    assert hparam_sources.field_table(framework) in page


def test_a_fresh_process_prints_the_line_and_the_warning_on_stderr():
    """As in a framework's worker where nothing configured logging: the INFO line is visible."""
    code = (
        "from gmpo_plugins.adapters.openrlhf.options import plan_loss\n"
        "plan_loss('gmpo_plugins.gspo', clip_eps_low=0.2, clip_eps_high=0.2, dual_clip=None,\n"
        "          token_level_loss=False)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop(OVERRIDE_ENV, None)
    env.pop("RANK", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(
        "gmpo_plugins: OpenRLHF --actor.policy_loss_type=gmpo_plugins.gspo -> gspo: eps_low=0.2 (framework default "
    )
    assert (
        "FrameworkDefaultWarning: gmpo_plugins: OpenRLHF --actor.policy_loss_type=gmpo_plugins.gspo: eps_low=0.2"
        in done.stderr
    )


def test_a_loss_needing_an_input_the_adapter_does_not_pass_is_refused_first():
    """topr reads rewards and real group ids (``LossSpec.requires``); an adapter that does not
    pass one refuses the loss by name with the reason, before any check of its settings
    (SkyRL's refusal of a loss not linear in the advantages included: prime_rl is not, but
    requires nothing). OpenRLHF passes rewards (from its training step's experience)."""
    message = r"^gmpo_plugins: topr needs per-sequence rewards, which the {} adapter does not pass yet$"
    groups = r"^gmpo_plugins: real needs group ids \(the rows that share a prompt\), which the OpenRLHF adapter does"
    with pytest.raises(OpenRLHFConfigError, match=groups):
        plan_loss("real", **OPENRLHF_DEFAULTS)
    assert plan_loss("topr", **OPENRLHF_DEFAULTS).reads_rewards
    with pytest.raises(SkyRLConfigError, match=message.format("SkyRL")):
        resolution_from_config(get_loss("topr"), None, "topr")  # before the config is read
    assert sources(resolution_from_config(get_loss("m2po"), skyrl_config(), "m2po"))  # SkyRL passes them
    assert sources(resolution_from_config(get_loss("grpo"), skyrl_config(), "grpo"))  # nothing required


def test_trl_refuses_a_loss_needing_an_input_by_name():
    """The same refusal through TRL's translation (no TRL import: it comes first; verl's is in
    tests/verl/test_registration.py)."""
    from gmpo_plugins.adapters.trl.options import UnsupportedTRLOptionError, loss_resolution

    needs = "decoupled_ppo needs the rollout engine's log-probs, which the TRL adapter does not pass yet"
    with pytest.raises(UnsupportedTRLOptionError, match=needs):
        loss_resolution(None, get_loss("decoupled_ppo"))


def test_a_loss_term_option_whose_input_the_adapter_does_not_pass_is_refused_by_name(monkeypatch):
    """The loss terms' options in the override go through each adapter's translation (OpenRLHF's
    and SkyRL's here; verl's and TRL's call the same ``resolve``): one that needs an input the
    adapter does not pass is refused by name, and one at its default (off) is accepted."""
    monkeypatch.setenv(OVERRIDE_ENV, '{"entropy_coef": 0.01}')
    needs = r"^gmpo_plugins: gmpo with entropy_coef=0.01 needs per-token entropy, which the {} adapter"
    with pytest.raises(OpenRLHFConfigError, match=needs.format("OpenRLHF")):
        plan_loss("gmpo", **OPENRLHF_DEFAULTS)
    with pytest.raises(SkyRLConfigError, match=needs.format("SkyRL")):
        resolution_from_config(get_loss("gmpo"), skyrl_config(), "gmpo")
    monkeypatch.setenv(OVERRIDE_ENV, '{"nll_coef": 0.1}')
    with pytest.raises(SkyRLConfigError, match="gmpo with nll_coef=0.1 needs per-sequence rewards"):
        resolution_from_config(get_loss("gmpo"), skyrl_config(), "gmpo")
    monkeypatch.setenv(OVERRIDE_ENV, '{"entropy_coef": 0.0, "top_entropy_quantile": 1.0, "nll_coef": 0.0}')
    terms_off = {"entropy_coef": 0.0, "top_entropy_quantile": 1.0, "nll_coef": 0.0}  # passed on, as any override
    assert plan_loss("gmpo", **OPENRLHF_DEFAULTS).hparams == {"eps_low": 0.2, "eps_high": 0.2, **terms_off}


def test_a_loss_term_option_resolves_like_a_hyper_parameter():
    """A row may feed a loss term's option (every loss accepts them): it takes its source, is
    checked under its setting's name, and an override of a term option reaches the loss's
    keywords and the line (TRL's table, ``adapters.trl.options``, has two such rows)."""
    row = Field("top_entropy_quantile", "cfg.quantile", 1.0, attribute("quantile"), when="always")
    gmpo = get_loss("gmpo")

    def run(quantile, override=None):
        overrides = {"loss_hparams": override or {}}
        config = SimpleNamespace(quantile=quantile)
        return resolve(gmpo, (row,), config, framework="TRL", selector="s", error=ValueError, overrides=overrides)

    resolution = run(0.25, {"nll_coef": 0.5})
    assert resolution.params() == {"top_entropy_quantile": 0.25, "nll_coef": 0.5}
    assert resolution.line().endswith(
        "top_entropy_quantile=0.25 (framework field cfg.quantile), nll_coef=0.5 (override loss_hparams)"
    )
    assert run(1.0).params() == {"top_entropy_quantile": 1.0}  # the field at its default: off, and said so
    with pytest.raises(ValueError, match=r"^gmpo_plugins: cfg.quantile=1.5 is not valid for s: it is the loss term"):
        run(1.5)


def test_a_correction_option_in_the_override_reaches_the_loss_or_is_refused_by_name(monkeypatch):
    """A correction option that reads no rollout log-probs (the off-policy mask) reaches the
    hyper-parameters the loss is called with, in OpenRLHF's and SkyRL's translation; one that
    reads them is refused by name where the adapter does not pass them (verl)."""
    monkeypatch.setenv(OVERRIDE_ENV, '{"off_policy_mask_threshold": 0.5}')
    assert plan_loss("gmpo", **OPENRLHF_DEFAULTS).hparams["off_policy_mask_threshold"] == 0.5
    assert resolution_from_config(get_loss("grpo"), skyrl_config(), "grpo").params()["off_policy_mask_threshold"] == 0.5
    monkeypatch.setenv(OVERRIDE_ENV, '{"rollout_is": "sequence"}')
    needs = "^gmpo_plugins: grpo with rollout_is='sequence' needs the rollout engine's log-probs, which the verl"
    with pytest.raises(ValueError, match=needs):  # the translation every adapter calls, as verl's does
        hparam_sources.resolve(get_loss("grpo"), (), {}, framework="verl", selector="loss_mode=grpo", error=ValueError)
