"""The ``gmpo-plugins`` command: one sub-command per module of this package."""

from gmpo_plugins.cli.main import main

__all__ = ["main"]
