"""Fixtures for the SkyRL adapter tests (real skyrl 0.3.0 on CPU, nothing downloaded).

On Python 3.11, skyrl needs ``tests/skyrl/shims`` on PYTHONPATH (see its docstring); the
skyrl nox session sets it.
"""

from __future__ import annotations

import pytest

pytest.importorskip("skyrl")


@pytest.fixture(scope="session")
def registered():
    """The registry losses registered into SkyRL's PolicyLossRegistry (in this process)."""
    from gmpo_plugins.adapters.skyrl import register_losses

    return register_losses()
