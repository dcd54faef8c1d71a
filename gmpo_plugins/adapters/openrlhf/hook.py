"""Apply the PolicyLoss patch lazily, in the driver and in every Ray worker.

``install()`` patches ``openrlhf.models.loss.PolicyLoss`` now if that module is imported,
otherwise the moment it is: a ``sys.meta_path`` finder wraps the module's loader and
patches the class right after the module body runs, before ``openrlhf.models`` (and
then ``ppo_actor``) copy the name. ``openrlhf.trainer.ray.ppo_actor`` is patched the same
way (``ActorPPOTrainer.training_step`` carries the registry loss's metrics to OpenRLHF's
logger, ``logged_metrics``, and the experience's rewards to the loss, ``episode_rewards``).
This module imports only the standard library: a
process that never imports OpenRLHF (or imports only parts that do not need
``openrlhf.models.loss``, such as vLLM engine actors) never loads deepspeed, torch or the
trainer because of it.

Ray workers import OpenRLHF themselves, so the driver's patch does not reach them. Ray's
``worker_process_setup_hook`` runs ``setup_worker`` in each worker at start-up (the
module must be importable there: an installed gmpo-plugins is)::

    ray.init(runtime_env=runtime_env({"env_vars": {...}}))
    # == {"env_vars": {...}, "worker_process_setup_hook": HOOK}

Under ``ray job submit`` Ray merges the job's runtime env into the driver's and refuses a
key present in both, so ``runtime_env`` leaves the hook out when the job's env already
carries it (``--runtime-env-json '{"worker_process_setup_hook": "<HOOK>"}'``).
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

TARGET = "openrlhf.models.loss"
TRAINER = "openrlhf.trainer.ray.ppo_actor"
HOOK = "gmpo_plugins.adapters.openrlhf.hook.setup_worker"
KEY = "worker_process_setup_hook"
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # ray._private.runtime_env.constants
HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"  # ray._private.ray_constants


def _patch(module: ModuleType) -> None:
    from gmpo_plugins.adapters.openrlhf.patch import patch_policy_loss

    patch_policy_loss(module)
    _patch_actor()


def _patch_trainer(module: ModuleType) -> None:
    from gmpo_plugins.adapters.openrlhf import episode_rewards
    from gmpo_plugins.adapters.openrlhf.logged_metrics import patch_trainer

    patch_trainer(module)
    episode_rewards.patch_training_step(module)


PATCHES = {TARGET: _patch, TRAINER: _patch_trainer}
"""Module name -> what patches it once its body has run."""


def _patch_actor() -> None:
    """The opt-in hidden-state log-probs (``hidden_logprobs``) on ``Actor``, imported before
    ``openrlhf.models.loss`` by ``openrlhf.models``."""
    from gmpo_plugins.adapters.openrlhf.hidden_logprobs import patch_if_enabled

    patch_if_enabled()


class _PatchingLoader(importlib.abc.Loader):
    """The real loader of a module of ``PATCHES``, then its patch."""

    def __init__(self, inner: importlib.abc.Loader, patch: Any) -> None:
        self._inner = inner
        self._patch = patch

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._patch(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... of the real loader
        return getattr(self._inner, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of ``PATCHES`` through the other finders and wraps their loaders."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _PostImportFinder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _PatchingLoader):
                    spec.loader = _PatchingLoader(spec.loader, PATCHES[fullname])
                return spec
        return None


def _install_finder() -> None:
    for name, patch in PATCHES.items():  # the loss first: ppo_actor imports it
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
    if not all(name in sys.modules for name in PATCHES) and not any(
        isinstance(finder, _PostImportFinder) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _PostImportFinder())


def install() -> None:
    """Make ``--actor.policy_loss_type <registry loss>`` work in this process (see module docstring).

    Checks the installed OpenRLHF version first: UnsupportedOpenRLHFVersionError when it is
    not installed, one UntestedFrameworkWarning outside the tested range. Idempotent.
    """
    from gmpo_plugins.adapters.openrlhf.version import check_version

    check_version()
    _install_finder()


def setup_worker() -> None:
    """Ray ``worker_process_setup_hook``: ``install()`` without the eager version check (an
    unsupported version raises with the same message when the worker imports PolicyLoss)."""
    _install_finder()


def job_setup_hook() -> str | None:
    """The setup hook of the Ray job this driver runs in (``ray job submit``), if any."""
    raw = os.environ.get(JOB_CONFIG_ENV)
    if not raw:
        return None
    env = json.loads(raw).get("runtime_env") or {}
    return env.get(KEY) or (env.get("env_vars") or {}).get(HOOK_ENV)


def runtime_env(base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A copy of the Ray runtime env ``base`` (e.g. OpenRLHF's ``{"env_vars": {...}}``) with
    ``worker_process_setup_hook = HOOK`` added.

    Added once: unchanged when ``base`` or the surrounding Ray job's env already has HOOK.
    Ray runs a single setup hook, so another hook in either raises ValueError naming it.
    """
    env = dict(base or {})
    for where, hook in (("the runtime env", env.get(KEY)), ("the Ray job's runtime env", job_setup_hook())):
        if hook == HOOK:
            return env
        if hook is not None:
            raise ValueError(
                f"gmpo_plugins: {where} already sets worker_process_setup_hook={hook!r}; Ray runs one setup "
                f"hook per worker, so call gmpo_plugins.adapters.openrlhf.hook.setup_worker() from it, or "
                f"use worker_process_setup_hook={HOOK!r}"
            )
    env[KEY] = HOOK
    return _with_settings(env)


def _with_settings(env: dict[str, Any]) -> dict[str, Any]:
    """The workers get the driver's opt-in settings (``hidden_logprobs.ENV``)."""
    from gmpo_plugins.adapters.openrlhf.hidden_logprobs import runtime_env as with_hidden_logprobs

    return with_hidden_logprobs(env)
