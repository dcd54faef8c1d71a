"""The loss registry: a pluggy PluginManager fed by the ``gmpo_plugins`` entry points.

- Built-in losses are always registered (they are the plugin ``gmpo-plugins:builtin``).
- Other distributions are discovered through the entry-point group ``gmpo_plugins``
  unless ``GMPO_PLUGINS_DISABLE_AUTOLOAD`` is true: ``1``, ``true``, ``yes``, ``on`` (any
  case) load only the built-ins; unset, empty, ``0``, ``false``, ``no``, ``off`` load every
  plugin; any other value counts as true, with a warning.
- A plugin that fails to import, or whose hook raises or returns something other than
  ``LossSpec`` objects, is skipped with a ``PluginLoadWarning``.
- A loss name claimed by two plugins (or a plugin and a built-in) is refused, for that name
  only: a ``PluginLoadWarning`` when the registry loads, and ``LossNameCollisionError``
  naming both distributions whenever the name is asked for. Every other loss keeps working,
  so one conflicting plugin never takes down the losses of the other distributions.
- An unknown name raises ``UnknownLossError`` listing the valid names and a close match.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import os
import warnings
from collections.abc import Iterable

import pluggy

from gmpo_plugins.core import hookspecs
from gmpo_plugins.core.spec import LossSpec

DISTRIBUTION = "gmpo-plugins"
BUILTIN_PLUGIN = f"{DISTRIBUTION}:builtin"
DISABLE_AUTOLOAD_ENV = "GMPO_PLUGINS_DISABLE_AUTOLOAD"


class UnknownLossError(KeyError):
    """No loss of that name is registered."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class LossNameCollisionError(RuntimeError):
    """The loss name asked for is claimed by two plugins (or a plugin and a built-in)."""


class PluginLoadWarning(UserWarning):
    """A plugin could not be loaded; the others keep working."""


FALSE_SPELLINGS = ("", "0", "false", "no", "off")
TRUE_SPELLINGS = ("1", "true", "yes", "on")


def autoload_enabled() -> bool:
    """False when GMPO_PLUGINS_DISABLE_AUTOLOAD is true (module docstring for the spellings)."""
    value = os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower()
    if value in FALSE_SPELLINGS:
        return True
    if value not in TRUE_SPELLINGS:
        warnings.warn(
            f"gmpo_plugins: {DISABLE_AUTOLOAD_ENV}={os.environ[DISABLE_AUTOLOAD_ENV]!r} is not one of "
            f"{list(TRUE_SPELLINGS)} or {list(FALSE_SPELLINGS)}; taken as true: only the built-in losses are loaded",
            PluginLoadWarning,
            stacklevel=3,
        )
    return False


class LossRegistry:
    """Losses by name, each tagged with the distribution that provided it."""

    def __init__(self, *, autoload: bool | None = None) -> None:
        from gmpo_plugins.core import losses

        self.plugin_manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.plugin_manager.add_hookspecs(hookspecs)
        self._providers: dict[str, str] = {}
        self._register(losses, BUILTIN_PLUGIN, DISTRIBUTION)
        if autoload_enabled() if autoload is None else autoload:
            self._load_entry_points()
        self._specs, self._refused = self._collect()

    def _register(self, plugin: object, name: str, distribution: str) -> None:
        self.plugin_manager.register(plugin, name=name)
        self._providers[name] = distribution

    def _load_entry_points(self) -> None:
        for entry_point in importlib.metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
            distribution = entry_point.dist.name if entry_point.dist is not None else "<unknown distribution>"
            name = f"{distribution}:{entry_point.name}"
            if self.plugin_manager.has_plugin(name) or self.plugin_manager.is_blocked(name):
                continue
            try:
                self._register(entry_point.load(), name, distribution)
            except Exception as exc:  # noqa: BLE001 - any import-time failure of a plugin
                warnings.warn(
                    f"gmpo_plugins: plugin {entry_point.name!r} ({entry_point.value}) from distribution "
                    f"{distribution!r} failed to load and is skipped: {exc!r}",
                    PluginLoadWarning,
                    stacklevel=2,
                )

    def _collect(self) -> tuple[dict[str, LossSpec], dict[str, str]]:
        """(the losses by name, the refused names with their collision message)."""
        claims: dict[str, list[LossSpec]] = {}
        for impl in self.plugin_manager.hook.gmpo_plugins_losses.get_hookimpls():  # registration order
            distribution = self._providers.get(impl.plugin_name, impl.plugin_name)
            try:
                provided = _loss_specs(impl.function())
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the others
                warnings.warn(
                    f"gmpo_plugins: plugin {impl.plugin_name!r} from distribution {distribution!r} "
                    f"failed in gmpo_plugins_losses() and is skipped: {exc!r}",
                    PluginLoadWarning,
                    stacklevel=2,
                )
                continue
            for spec in provided:
                claims.setdefault(spec.name, []).append(dataclasses.replace(spec, provider=distribution))
        specs: dict[str, LossSpec] = {}
        refused: dict[str, str] = {}
        for name, claimed in claims.items():
            if len(claimed) == 1:
                specs[name] = claimed[0]
                continue
            refused[name] = collision_message(name, [spec.provider for spec in claimed])
            warnings.warn(refused[name], PluginLoadWarning, stacklevel=2)
        return specs, refused

    def names(self) -> list[str]:
        return sorted(self._specs)

    def specs(self) -> list[LossSpec]:
        return [self._specs[name] for name in self.names()]

    def refused(self) -> dict[str, str]:
        """Names refused because several distributions claim them -> the collision message."""
        return dict(self._refused)

    def get(self, name: str) -> LossSpec:
        try:
            return self._specs[name]
        except KeyError:
            pass
        if name in self._refused:
            raise LossNameCollisionError(self._refused[name])
        from gmpo_plugins.core.losses import NOT_REGISTERED  # the built-in plugin's module

        if name in NOT_REGISTERED:
            raise UnknownLossError(f"loss {name!r} is not in the registry: {NOT_REGISTERED[name]}")
        hint = difflib.get_close_matches(str(name), self.names(), n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise UnknownLossError(f"unknown loss {name!r}{suggestion}; available: {', '.join(self.names())}")


_default: LossRegistry | None = None


def default_registry() -> LossRegistry:
    """The process-wide registry, built on first use."""
    global _default
    if _default is None:
        _default = LossRegistry()
    return _default


def get_loss(name: str) -> LossSpec:
    """The registered loss called ``name``; raises UnknownLossError listing the valid names."""
    return default_registry().get(name)


def list_losses() -> list[LossSpec]:
    """Every registered loss, sorted by name; ``spec.provider`` names its distribution."""
    return default_registry().specs()


def refused_losses() -> dict[str, str]:
    """Loss names claimed by several distributions (refused, for those names only) -> why."""
    return default_registry().refused()


def collision_message(name: str, distributions: list[str]) -> str:
    """Why the loss ``name``, claimed by each of ``distributions``, is refused."""
    quoted = [repr(distribution) for distribution in distributions]
    claimants = (
        f"both distribution {quoted[0]} and distribution {quoted[1]}"
        if len(quoted) == 2
        else f"distributions {', '.join(quoted[:-1])} and {quoted[-1]}"
    )
    return (
        f"gmpo_plugins: loss {name!r} is registered by {claimants}; the name is refused (every other loss "
        f"works): uninstall one of them, or load only the built-ins with {DISABLE_AUTOLOAD_ENV}=1"
    )


def _loss_specs(returned: object) -> list[LossSpec]:
    """What a ``gmpo_plugins_losses`` implementation returned, as a list; TypeError naming the
    first thing that is not a ``LossSpec``."""
    if not isinstance(returned, Iterable):
        raise TypeError(f"expected an iterable of LossSpec objects, got {returned!r}")
    provided = list(returned)
    bad = [spec for spec in provided if not isinstance(spec, LossSpec)]
    if bad:
        raise TypeError(f"expected LossSpec objects, got {bad[0]!r}")
    return [spec for spec in provided if isinstance(spec, LossSpec)]
