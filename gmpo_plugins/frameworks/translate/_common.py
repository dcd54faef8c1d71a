"""What every translator does the same way: check that the framework's adapter will run the
spec's loss hyper-parameters exactly (its own settings, then ``GMPO_PLUGINS_LOSS_HPARAMS`` for
what they cannot carry), and write the reward bridge's import lines."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_SUM_NORM
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.launch import UnsupportedSettingError
from gmpo_plugins.frameworks.reward import split_reference
from gmpo_plugins.frameworks.spec import RunSpec

ADAPTERS = Path(__file__).resolve().parents[2] / "adapters"


def adapter_options(framework: str) -> ModuleType:
    """``gmpo_plugins.adapters.<framework>.options``, which imports no framework.

    The verl adapter package registers the losses into verl when it is imported (verl's
    plugin entry point), so without verl installed its ``options`` module is loaded from
    its file and entered in ``sys.modules`` under its own name: importing the package later
    reuses that module (one ``VerlConfigError`` class).
    """
    name = f"gmpo_plugins.adapters.{framework}.options"
    if name in sys.modules:
        return sys.modules[name]
    if framework != "verl" or importlib.util.find_spec("verl") is not None:
        return importlib.import_module(name)
    module_spec = importlib.util.spec_from_file_location(name, ADAPTERS / framework / "options.py")
    assert module_spec is not None and module_spec.loader is not None  # the file ships with the package
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def check_hparams(
    framework: str,
    spec: RunSpec,
    expressed: Mapping[str, Any],
    *,
    wanted: Mapping[str, Any] | None = None,
    why: str = "",
) -> None:
    """Refuse unless the adapter of ``framework``, given the translated settings, calls the
    loss with the spec's hyper-parameters: ``expressed`` is what the adapter's own option
    translation returned (keys it leaves out keep the registry default), ``wanted``
    overrides the spec's resolved values (KL settings the framework puts into the loss)."""
    loss = get_loss(spec.loss)
    for key, value in target_hparams(spec, wanted).items():
        got = expressed.get(key, loss.defaults[key])
        if got != value:
            source = "the registry default" if key not in expressed else "its translation of the settings"
            raise UnsupportedSettingError(
                framework,
                f"loss_hparams.{key}={value!r}",
                f"its adapter would call {spec.loss} with {key}={got!r} ({source})" + (f"; {why}" if why else ""),
            )


def target_hparams(spec: RunSpec, wanted: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The hyper-parameters the loss must be called with: the spec's resolved values, ``wanted``
    over them, without ``norm_length`` unless the reduction uses it."""
    target = {**spec.resolved_hparams(), **(wanted or {})}
    if target.get("reduction") != SEQ_MEAN_TOKEN_SUM_NORM:  # the constant length is used by that reduction only
        target.pop("norm_length", None)
    return target


@contextlib.contextmanager
def _override_env(values: Mapping[str, Any]) -> Iterator[None]:
    """``GMPO_PLUGINS_LOSS_HPARAMS`` set to ``values`` (unset when empty) while the adapter reads
    it, as the framework's processes will see it; this process's own value restored after."""
    saved = os.environ.get(OVERRIDE_ENV)
    if values:
        os.environ[OVERRIDE_ENV] = override_json(values)
    else:
        os.environ.pop(OVERRIDE_ENV, None)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(OVERRIDE_ENV, None)
        else:
            os.environ[OVERRIDE_ENV] = saved


def override_json(values: Mapping[str, Any]) -> str:
    """``GMPO_PLUGINS_LOSS_HPARAMS``'s value for ``values`` (JSON; None is null)."""
    return json.dumps(dict(values))


def override_env(values: Mapping[str, Any]) -> dict[str, str]:
    """The launch's environment entry carrying ``values`` ({} when there is nothing to carry)."""
    return {OVERRIDE_ENV: override_json(values)} if values else {}


def loss_override(
    framework: str,
    spec: RunSpec,
    read: Callable[[], Mapping[str, Any]],
    *,
    wanted: Mapping[str, Any] | None = None,
    why: str = "",
) -> dict[str, Any]:
    """What ``GMPO_PLUGINS_LOSS_HPARAMS`` must carry so that the adapter of ``framework`` calls the
    loss with exactly the spec's hyper-parameters (``target_hparams``).

    ``read`` runs the adapter's own resolution on the translated settings (it reads the
    variable) and returns the hyper-parameters it would call the loss with; it raises
    UnsupportedSettingError for settings the adapter refuses. Read first without the
    variable, the settings decide; every hyper-parameter they leave at another value (a
    setting the framework lacks: verl's dual clip always on, SkyRL's none) goes into the
    variable, and the adapter reads the settings again with it. A value the adapter still
    does not reproduce (an override it refuses or overrules) is refused (``check_hparams``).
    """
    loss = get_loss(spec.loss)
    with _override_env({}):
        expressed = read()
    extra = {
        key: value
        for key, value in target_hparams(spec, wanted).items()
        if expressed.get(key, loss.defaults[key]) != value
    }
    if extra:
        with _override_env(extra):
            expressed = read()
    check_hparams(framework, spec, expressed, wanted=wanted, why=why)
    return extra


def reward_import(reference: str, alias: str = "_reward") -> str:
    """Python lines that bind the spec's reward function to ``alias`` in a bridge file."""
    target, name = split_reference(reference)
    if not target.endswith(".py"):
        return f"from {target} import {name} as {alias}\n"
    return (
        "import importlib.util\n\n"
        f"_spec = importlib.util.spec_from_file_location('gmpo_plugins_run_reward', {target!r})\n"
        "_module = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_module)\n"
        f"{alias} = _module.{name}\n"
    )


def kl_refusal(framework: str, spec: RunSpec, estimators: Mapping[str, str], setting: str) -> str:
    """The framework's name for ``spec.kl_estimator``; UnsupportedSettingError otherwise."""
    if spec.kl_estimator not in estimators:
        raise UnsupportedSettingError(
            framework,
            f"kl_estimator={spec.kl_estimator!r}",
            f"{setting} offers {', '.join(sorted(estimators))}",
        )
    return estimators[spec.kl_estimator]


def advantage_formula(spec: RunSpec, epsilon: str) -> str:
    """The group advantage a framework computes, worded alike for every framework
    (``Difference.first_update``): ``epsilon`` is what it adds to the group's (unbiased) std."""
    return f"(r - group mean) / (group std + {epsilon})" if spec.advantage_std_norm else "r - group mean"


def precision(spec: RunSpec, bfloat16: str) -> str:
    """The training precision (``Difference.first_update``): ``bfloat16`` describes the framework's bf16."""
    return "float32" if spec.dtype == "float32" else bfloat16


def kl_placement(spec: RunSpec, where: str) -> str:
    """Where the KL term enters (``Difference.first_update``); the same for every framework without KL."""
    return "no KL term (kl_coef = 0)" if spec.kl_coef == 0 else where


def mini_batch_order(spec: RunSpec, order: str) -> str:
    """The order of the mini-batches within an RL step (``Difference.first_update``): ``order``
    where an epoch has several mini-batches; "" with one (its order inside then changes the
    summation order only, which the tolerance covers)."""
    return order if spec.responses_per_step > spec.mini_batch_size else ""


FILE_ORDER = "the first prompts_per_step rows of the dataset"
