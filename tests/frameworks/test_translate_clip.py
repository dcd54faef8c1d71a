"""grpo and dapo through the four translators: each framework's own clip settings where it has
them, ``GMPO_PLUGINS_LOSS_HPARAMS`` in the launch's environment for what it lacks (verl's dual
clip that is always on, SkyRL's and TRL's missing one), and the adapter, reading the launch's
settings and that environment back, calls the loss with exactly the spec's hyper-parameters."""

from __future__ import annotations

import ast
import json
import os
from types import SimpleNamespace

import pytest

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.spec import load_spec
from gmpo_plugins.frameworks.translate import translate
from gmpo_plugins.frameworks.translate._common import adapter_options, target_hparams
from gmpo_plugins.frameworks.translate.verl import VERL_DEFAULTS
from tests.frameworks.test_translate import flags, overrides

ACTOR = "actor_rollout_ref.actor."
ALGORITHM = "trainer.algorithm."


def literal(text: str):
    """An override's value as the framework's config parser reads a number ("0.2" -> 0.2)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def env_hparams(launch) -> dict:
    return json.loads(launch.env[OVERRIDE_ENV]) if OVERRIDE_ENV in launch.env else {}


def verl_read(launch, loss: str) -> dict:
    got = overrides(launch)
    actor = {key.removeprefix(ACTOR): literal(value) for key, value in got.items() if key.startswith(ACTOR)}
    config = SimpleNamespace(**{**VERL_DEFAULTS, **actor})
    resolution = adapter_options("verl").resolution_from_config(
        get_loss(loss), config, config.loss_agg_mode, f"gmpo_plugins.{loss}"
    )
    return resolution.params()


def openrlhf_read(launch, loss: str) -> dict:
    got = flags(launch)
    low, high = (float(value) for value in got["--actor.eps_clip_low_high"])
    dual = float(got["--actor.dual_clip"][0]) if "--actor.dual_clip" in got else None
    resolution = adapter_options("openrlhf").loss_resolution(
        got["--actor.policy_loss_type"][0],
        clip_eps_low=low,
        clip_eps_high=high,
        dual_clip=dual,
        token_level_loss=got["--actor.loss_agg_mode"] == ["token-mean"],
    )
    return resolution.params()


def skyrl_read(launch, loss: str) -> dict:
    fields = {
        key.removeprefix(ALGORITHM): literal(value)
        for key, value in overrides(launch).items()
        if key.startswith(ALGORITHM) and key.count(".") == 2
    }
    resolution = adapter_options("skyrl").resolution_from_config(
        get_loss(loss), SimpleNamespace(**fields), f"gmpo_plugins.{loss}"
    )
    return resolution.params()


def trl_config(launch) -> dict:
    """The GRPOConfig keywords the launch's script passes (its CONFIG constant)."""
    (config,) = [
        ast.literal_eval(node.value)
        for node in ast.parse(launch.files["train_trl.py"]).body
        if isinstance(node, ast.Assign) and node.targets[0].id == "CONFIG"
    ]
    return config


def trl_read(launch, loss: str) -> dict:
    # TRL's resolution needs a GRPOConfig (TRL installed): its table of translated fields instead
    config = trl_config(launch)
    spec = get_loss(loss)
    translated = adapter_options("trl").TRANSLATED
    fields = {key: config[name] for key, name in translated.items() if key in spec.defaults and name in config}
    return {**fields, **env_hparams(launch)}


READ = {"verl": verl_read, "openrlhf": openrlhf_read, "trl": trl_read, "skyrl": skyrl_read}
CASES = {
    # loss_hparams -> framework -> (the framework's own settings, what the environment carries)
    "grpo, verl's dual clip 3": (
        "grpo",
        {"eps_low": 0.2, "eps_high": 0.2, "dual_clip": 3.0},
        {
            "verl": ({ACTOR + "clip_ratio_c": "3.0", ACTOR + "loss_agg_mode": "seq-mean-token-mean"}, {}),
            "openrlhf": ({"--actor.dual_clip": ["3.0"], "--actor.loss_agg_mode": ["seq-mean-token-mean"]}, {}),
            "trl": ({"epsilon": 0.2, "epsilon_high": 0.2}, {"dual_clip": 3.0}),
            "skyrl": ({ALGORITHM + "loss_reduction": "sequence_mean"}, {"dual_clip": 3.0}),
        },
    ),
    "grpo, no dual clip": (
        "grpo",
        {"eps_low": 0.2, "eps_high": 0.2},
        {
            "verl": ({ACTOR + "clip_ratio_low": "0.2"}, {"dual_clip": None}),  # clip_ratio_c stays at 3.0
            "openrlhf": ({"--actor.eps_clip_low_high": ["0.2", "0.2"]}, {}),
            "trl": ({"epsilon": 0.2}, {}),
            "skyrl": ({ALGORITHM + "eps_clip_low": "0.2"}, {}),
        },
    ),
    "dapo, its defaults": (
        "dapo",
        {},
        {
            "verl": (
                {
                    ACTOR + "clip_ratio_low": "0.2",
                    ACTOR + "clip_ratio_high": "0.28",
                    ACTOR + "loss_agg_mode": "token-mean",
                },
                {"dual_clip": None},
            ),
            "openrlhf": ({"--actor.eps_clip_low_high": ["0.2", "0.28"], "--actor.loss_agg_mode": ["token-mean"]}, {}),
            "trl": ({"epsilon": 0.2, "epsilon_high": 0.28}, {}),
            "skyrl": (
                {
                    ALGORITHM + "eps_clip_low": "0.2",
                    ALGORITHM + "eps_clip_high": "0.28",
                    ALGORITHM + "loss_reduction": "token_mean",
                },
                {},
            ),
        },
    ),
    "dapo with a dual clip": (
        "dapo",
        {"dual_clip": 3.0},
        {
            "verl": ({ACTOR + "clip_ratio_c": "3.0"}, {}),
            "openrlhf": ({"--actor.dual_clip": ["3.0"]}, {}),
            "trl": ({}, {"dual_clip": 3.0}),
            "skyrl": ({}, {"dual_clip": 3.0}),
        },
    ),
}


def settings(launch) -> dict:
    """The launch's own settings in the form the cases name them."""
    if launch.framework in ("verl", "skyrl"):
        return overrides(launch)
    if launch.framework == "openrlhf":
        return flags(launch)
    return trl_config(launch)


@pytest.mark.parametrize("case", list(CASES))
def test_grpo_and_dapo_reach_every_framework(write_spec, monkeypatch, case):
    loss, hparams, expected = CASES[case]
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    spec = load_spec(write_spec(loss=loss, loss_hparams=hparams))
    target = target_hparams(spec)
    for launch in translate(spec):
        own, env = expected[launch.framework]
        got = settings(launch)
        assert {key: got.get(key) for key in own} == own, launch.framework
        assert env_hparams(launch) == env, launch.framework
        # the environment holds the spec's own values, and only for what the settings lack
        assert all(target[key] == value for key, value in env.items())
        # the adapter, given the launch's settings and environment, calls the loss with the spec's values
        if env:
            monkeypatch.setenv(OVERRIDE_ENV, launch.env[OVERRIDE_ENV])
        else:
            monkeypatch.delenv(OVERRIDE_ENV, raising=False)
        defaults = get_loss(loss).defaults
        called = {**defaults, **READ[launch.framework](launch, loss)}
        assert {key: called[key] for key in target} == target, launch.framework


def test_a_translation_ignores_and_keeps_this_process_override(write_spec, monkeypatch):
    # the driver's own GMPO_PLUGINS_LOSS_HPARAMS decides nothing in the translation, and survives it
    monkeypatch.setenv(OVERRIDE_ENV, json.dumps({"dual_clip": 2.0}))
    spec = load_spec(write_spec(loss="grpo", loss_hparams={"dual_clip": 3.0}))
    launches = {launch.framework: launch for launch in translate(spec)}
    assert env_hparams(launches["skyrl"]) == {"dual_clip": 3.0}
    assert OVERRIDE_ENV not in launches["verl"].env
    assert os.environ[OVERRIDE_ENV] == json.dumps({"dual_clip": 2.0})
