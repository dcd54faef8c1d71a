"""Hook specifications for gmpo-plugins plugins.

A plugin is any module or object with functions marked ``@hookimpl`` whose names are
declared here. Third-party distributions expose one through an entry point in the group
``gmpo_plugins``::

    # pyproject.toml of the plugin distribution
    [project.entry-points.gmpo_plugins]
    my_losses = "my_package.losses"

    # my_package/losses.py
    from gmpo_plugins.plugin import LossSpec, hookimpl

    @hookimpl
    def gmpo_plugins_losses():
        return [LossSpec(name="my_loss", fn=my_loss, description="...", defaults={...})]

The built-in losses are registered the same way (``gmpo_plugins.core.losses``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from gmpo_plugins.core.spec import LossSpec

PROJECT_NAME = "gmpo_plugins"
ENTRY_POINT_GROUP = "gmpo_plugins"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def gmpo_plugins_losses() -> Iterable[LossSpec]:
    """Return the losses this plugin provides.

    Called once per process, when the registry is first used. The function of each spec
    must follow the loss contract ``LossFn``: ``fn(inputs: LossInputs, batch: BatchInfo,
    **hparams) -> LossOutput`` with every accepted hyper-parameter listed in ``spec.defaults``.

    Returns:
        An iterable of ``gmpo_plugins.plugin.LossSpec``. Each name must be unique across all
        installed plugins: a name claimed twice is refused (an error naming both
        distributions when it is asked for), never a silent override.
    """
    raise NotImplementedError  # a specification: pluggy calls the plugins' implementations
