"""The run spec's reward function: one signature, found by reference, checked before any trainer.

    reward(response: str, answer: str) -> float

``response`` is the generated text (no prompt), ``answer`` the dataset row's ``answer``. A
reference is ``FILE.py:FUNCTION`` (a path, relative to the spec's folder) or
``package.module:FUNCTION`` (importable in every framework's virtualenv). Each framework's
translator wraps it in that framework's reward hook (verl's ``compute_score``, OpenRLHF's
``reward_func``, a TRL reward function, a SkyRL environment).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIGNATURE = "reward(response: str, answer: str) -> float"


class RewardError(ValueError):
    """A reward reference that does not resolve to a function of ``SIGNATURE``."""


@dataclass(frozen=True)
class Reward:
    """A checked reward: ``reference`` (``/abs/file.py:fn`` or ``module:fn``) and the function."""

    reference: str
    function: Callable[..., Any]


def split_reference(reference: str) -> tuple[str, str]:
    """(file or module, function name) of ``reference``; RewardError for another form."""
    target, sep, name = reference.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise RewardError(f"expected FILE.py:FUNCTION or package.module:FUNCTION, got {reference!r}")
    return target, name


def _import(target: str, base: Path) -> tuple[str, Any]:
    """(normalised target, module) for a file path or a module name."""
    if target.endswith(".py"):
        path = (base / target).resolve()
        if not path.is_file():
            raise RewardError(f"{path} does not exist")
        module_spec = importlib.util.spec_from_file_location(f"gmpo_plugins_reward_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise RewardError(f"{path} cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        loader = module_spec.loader
        try:
            loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported in one line
            raise RewardError(f"{path} failed to import: {type(exc).__name__}: {exc}") from None
        return str(path), module
    try:
        return target, importlib.import_module(target)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported in one line
        raise RewardError(f"module {target!r} failed to import: {type(exc).__name__}: {exc}") from None


def check_signature(function: Any, reference: str) -> None:
    """RewardError unless ``function`` can be called as ``function(response, answer)``."""
    if not callable(function):
        raise RewardError(f"{reference} is not callable (expected {SIGNATURE})")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin without a signature: it is called and checked by the framework
    try:
        signature.bind("response", "answer")
    except TypeError as exc:
        raise RewardError(f"{reference} has the signature {signature}, expected {SIGNATURE} ({exc})") from None


def load_reward(reference: str, base: Path) -> Reward:
    """Import and check the reward ``reference`` (module docstring); raises RewardError."""
    target, name = split_reference(reference)
    target, module = _import(target, base)
    function = getattr(module, name, None)
    if function is None:
        raise RewardError(f"{target} has no function {name!r}")
    check_signature(function, f"{target}:{name}")
    return Reward(f"{target}:{name}", function)
