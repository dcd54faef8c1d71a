"""Fixtures for the OpenRLHF adapter tests (real OpenRLHF 0.11.2 on CPU, no downloads).

The shims directory (test-only stand-ins for flash-attn's CUDA extension and vLLM, see
its files) is put on ``sys.path`` and on ``PYTHONPATH`` (inherited by subprocesses and
Ray workers); ``TORCHDYNAMO_DISABLE=1`` keeps OpenRLHF's ``@torch.compile``'d entropy off
the CPU compiler. ``nox -s openrlhf`` sets both too. Importing OpenRLHF takes 8-20 s,
so everything that needs it is session-scoped.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

SHIMS = str(Path(__file__).parent / "shims")
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
if SHIMS not in sys.path:
    sys.path.insert(0, SHIMS)
if SHIMS not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SHIMS, os.environ.get("PYTHONPATH")) if p)

import pytest  # noqa: E402

from gmpo_plugins.adapters.openrlhf import install  # noqa: E402


@pytest.fixture(scope="session")
def loss_module():
    """``openrlhf.models.loss`` imported after ``install()``: its PolicyLoss is patched."""
    install()
    import openrlhf.models.loss as module

    return module


@pytest.fixture(scope="session")
def pristine_loss_module(loss_module):
    """A second, unpatched execution of OpenRLHF's installed ``models/loss.py`` (same source,
    its own PolicyLoss class), for byte-identity checks of ppo/gspo."""
    spec = importlib.util.spec_from_file_location("openrlhf.models._pristine_loss", loss_module.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not getattr(module.PolicyLoss, "__gmpo_plugins_patched__", False)
    return module


@pytest.fixture(scope="session")
def tiny_openrlhf(loss_module):
    """The trainer-level helpers (imports ppo_actor and the CLI module once)."""
    from tests.openrlhf import tiny

    return tiny
