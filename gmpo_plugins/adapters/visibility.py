"""Whether each installed framework sees the registry losses through its own mechanism.

``gmpo-plugins doctor`` runs one check per framework; a framework that is not installed is
reported as such and is no failure. Each check goes through the path a training run takes:

    verl      ``import verl`` (which imports the ``verl.plugins`` entry points, this
              package's adapter among them; verl 0.8 imports only ``VERL_USE_EXTERNAL_MODULES``),
              then verl's ``get_policy_loss_fn`` for ``gmpo_plugins.<name>`` of every registry
              loss must return our function
    OpenRLHF  ``install()`` (what ``gmpo-openrlhf`` and ``runtime_env`` workers run), then
              ``openrlhf.models.loss.PolicyLoss`` must carry the patch and, for every registry
              loss, build with ``policy_loss_type=gmpo_plugins.<name>`` running it (or refuse
              both --actor.loss_agg_mode values with our OpenRLHFConfigError, as dr_grpo does)
    SkyRL     ``register_losses()``, then SkyRL's ``PolicyLossRegistry.get`` for
              ``gmpo_plugins.<name>`` must return our loss
    TRL       ``RegistryGRPOTrainer`` imports (it imports trl) and subclasses trl's
              ``GRPOTrainer``

A loss the adapter refuses because it requires an input the adapter does not pass
(``adapters.inputs``) is listed after the check, with the reason; it is no failure.

A check that raises is a failure whose detail is the exception, never a traceback. Each line
also gives the range the adapter is tested with (``upstream.TESTED``) and whether the
installed version is inside it; outside is reported, not a failure (the adapter warns).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from gmpo_plugins.adapters.inputs import refusal
from gmpo_plugins.adapters.names import PREFIX
from gmpo_plugins.adapters.upstream import TESTED, in_tested_range, installed_version
from gmpo_plugins.core.registry import get_loss, list_losses


@dataclass(frozen=True)
class FrameworkCheck:
    """One framework's line of the doctor's report. ``ok`` is None when the framework is
    not installed (nothing to check), else whether it sees every registry loss;
    ``in_tested_range`` is None when it is not installed, else whether ``version`` is in
    ``tested_range``."""

    framework: str
    distribution: str
    version: str | None
    ok: bool | None
    detail: str
    tested_range: str = ""
    in_tested_range: bool | None = None


def _names() -> list[str]:
    return [spec.name for spec in list_losses()]


def refused_inputs(framework: str) -> str:
    """``"; refuses topr (topr needs ..., which the verl adapter does not pass yet)"`` for the
    losses whose required inputs the adapter does not pass, or ``""``."""
    reasons = [(spec.name, refusal(spec, framework)) for spec in list_losses()]
    refused = [f"{name} ({reason})" for name, reason in reasons if reason is not None]
    return f"; refuses {', '.join(refused)}" if refused else ""


def _verl() -> str:
    import verl  # noqa: F401 - importing verl loads the verl.plugins entry points
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from gmpo_plugins.adapters.verl.registration import is_ours

    missing = []
    for name in _names():
        try:
            fn = get_policy_loss_fn(PREFIX + name)
        except (KeyError, ValueError, NotImplementedError):
            fn = None
        if fn is None or not is_ours(fn):
            missing.append(PREFIX + name)
    loaded_by, hint = _verl_loading()
    if missing:
        raise LookupError(f"after `import verl`, get_policy_loss_fn does not give our loss for {missing}{hint}")
    return f"get_policy_loss_fn resolves {len(_names())} losses after `import verl` ({loaded_by})"


VERL_ADAPTER = "gmpo_plugins.adapters.verl"


def _verl_loading() -> tuple[str, str]:
    """(what loads the verl adapter at ``import verl``, the hint for a failed check): the
    ``verl.plugins`` entry point from verl 0.9; before it (``verl_releases``), only verl's
    ``VERL_USE_EXTERNAL_MODULES`` (or ``actor_rollout_ref.model.external_lib`` in the workers)."""
    from gmpo_plugins.adapters.verl_releases import installed

    release = installed()
    if release.entry_points:
        return "verl.plugins entry point", ""
    modules = os.environ.get("VERL_USE_EXTERNAL_MODULES", "")
    loaded_by = (
        f"VERL_USE_EXTERNAL_MODULES={modules}"
        if VERL_ADAPTER in modules.split(",")
        else "the adapter imported in this process"
    )
    note = f"verl {release.minor} does not import the verl.plugins entry points"
    hint = (
        f"; {note}: set VERL_USE_EXTERNAL_MODULES={VERL_ADAPTER} "
        f"(or actor_rollout_ref.model.external_lib={VERL_ADAPTER})"
    )
    return f"{loaded_by}; {note}", hint


def _openrlhf() -> str:
    from gmpo_plugins.adapters.openrlhf import OpenRLHFConfigError, install
    from gmpo_plugins.adapters.openrlhf.patch import is_patched
    from gmpo_plugins.adapters.openrlhf.patch import refusal as patch_refusal
    from gmpo_plugins.adapters.openrlhf.plan_attribute import registry_plan

    install()
    import openrlhf.models.loss as loss_module

    why = patch_refusal(loss_module.PolicyLoss)
    if why is not None:
        raise LookupError(f"PolicyLoss not patched (OpenRLHF's own ppo/gspo run unchanged): {why}")
    if not is_patched(loss_module.PolicyLoss):
        raise LookupError("openrlhf.models.loss.PolicyLoss is not patched after install()")
    refused = []
    for name in _names():
        if refusal(get_loss(name), "OpenRLHF") is not None:
            continue  # listed with its reason (``refused_inputs``)
        plan = None
        for token_level_loss in (False, True):  # --actor.loss_agg_mode seq-mean-token-mean, token-mean
            try:
                policy_loss = loss_module.PolicyLoss(
                    0.4, 0.4, policy_loss_type=PREFIX + name, token_level_loss=token_level_loss
                )
            except OpenRLHFConfigError:  # our refusal of that mode: the registry path is active
                continue
            plan = registry_plan(policy_loss)
            if plan is None:
                raise LookupError(f"PolicyLoss(policy_loss_type={PREFIX + name!r}) does not run the registry loss")
            break
        if plan is None:
            refused.append(PREFIX + name)
    built = len([name for name in _names() if refusal(get_loss(name), "OpenRLHF") is None]) - len(refused)
    return f"PolicyLoss patched; builds {built} losses" + (f", refuses {refused} by design" if refused else "")


def _skyrl() -> str:
    from gmpo_plugins.adapters.skyrl.registration import is_ours, register_losses, skyrl_policy_loss_registry

    register_losses()
    registry = skyrl_policy_loss_registry()
    missing = [PREFIX + name for name in _names() if not is_ours(registry.get(PREFIX + name))]
    if missing:
        raise LookupError(f"PolicyLossRegistry.get does not give our loss for {missing}")
    return f"PolicyLossRegistry resolves {len(_names())} losses after register_losses()"


def _trl() -> str:
    from trl import GRPOTrainer

    from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

    if not issubclass(RegistryGRPOTrainer, GRPOTrainer):
        raise LookupError("RegistryGRPOTrainer is not a trl.GRPOTrainer")
    return f"RegistryGRPOTrainer(loss=...) takes any of {len(_names())} losses"


FRAMEWORKS: tuple[tuple[str, str, Callable[[], str]], ...] = (
    ("verl", "verl", _verl),
    ("OpenRLHF", "openrlhf", _openrlhf),
    ("SkyRL", "skyrl", _skyrl),
    ("TRL", "trl", _trl),
)
"""(framework, distribution name, check) per framework."""


def framework_checks() -> list[FrameworkCheck]:
    """One ``FrameworkCheck`` per framework of ``FRAMEWORKS``, in that order."""
    checks = []
    for framework, distribution, check in FRAMEWORKS:
        version = installed_version(distribution)
        tested = f"{distribution}{TESTED[distribution].specifier}" if distribution in TESTED else ""
        if version is None:
            checks.append(FrameworkCheck(framework, distribution, None, None, "not installed", tested))
            continue
        inside = in_tested_range(distribution, version) if tested else None
        try:
            detail = check() + refused_inputs(framework)
        except Exception as error:  # noqa: BLE001 - any failure is reported, named, and fails the doctor
            failure = f"{type(error).__name__}: {error}"
            checks.append(FrameworkCheck(framework, distribution, version, False, failure, tested, inside))
        else:
            checks.append(FrameworkCheck(framework, distribution, version, True, detail, tested, inside))
    return checks
