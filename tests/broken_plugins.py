"""Broken installs made in a temporary site folder (a ``.dist-info`` folder there is an
installed distribution to ``importlib.metadata`` once the folder is on PYTHONPATH), for the
tests that check a broken install fails loudly in a fresh process or a Ray worker."""

from __future__ import annotations

import os
from pathlib import Path

COLLIDER = '''
"""A plugin that claims the built-in name "gmpo"."""
from gmpo_plugins.plugin import LossSpec, hookimpl

@hookimpl
def gmpo_plugins_losses():
    return [LossSpec(name="gmpo", fn=lambda inputs, batch: None, description="collides")]
'''


def distribution(site: Path, name: str, entry_points: str) -> None:
    """A minimal installed distribution ``name`` 0.0 in ``site`` with ``entry_points``."""
    info = site / f"{name.replace('-', '_')}-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(entry_points)


def with_collider(site: Path) -> Path:
    """``site`` with the distribution gmpo-collider, a gmpo_plugins plugin registering "gmpo"
    (the registry refuses the collision, naming both distributions)."""
    (site / "gmpo_collider.py").write_text(COLLIDER)
    distribution(site, "gmpo-collider", "[gmpo_plugins]\ncollider = gmpo_collider\n")
    return site


def pythonpath_with(site: Path) -> str:
    """This process's PYTHONPATH with ``site`` first."""
    return os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
