"""Framework registry and where a framework runs."""

import importlib.util
import os
import sys

import pytest
import torch

from gmpo_plugins.compare.backends import (
    FRAMEWORKS,
    BackendError,
    CoreBackend,
    PolicyLossCall,
    Runner,
    framework_info,
    load_backend,
    resolve_runner,
)
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import BatchInfo, LossInputs


def test_unknown_framework_lists_the_valid_ones():
    with pytest.raises(BackendError, match="unknown framework 'jax'; valid: core, verl, openrlhf, trl"):
        framework_info("jax")


def test_core_runs_in_process(monkeypatch):
    monkeypatch.delenv("GMPO_PLUGINS_PYTHON_CORE", raising=False)
    assert resolve_runner("core") == Runner("core", None)
    assert isinstance(load_backend("core"), CoreBackend)


def test_env_var_selects_a_subprocess(monkeypatch):
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_CORE", sys.executable)
    assert resolve_runner("core") == Runner("core", sys.executable)


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl installed here")
def test_nox_virtualenv_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv("GMPO_PLUGINS_PYTHON_VERL", raising=False)
    with pytest.raises(BackendError, match="run `python3 -m nox -s verl` first"):
        resolve_runner("verl", cwd=tmp_path)
    python = tmp_path / ".nox" / "verl" / "bin" / "python"
    python.parent.mkdir(parents=True)
    os.symlink(sys.executable, python)
    assert resolve_runner("verl", cwd=tmp_path) == Runner("verl", str(python))


def test_every_framework_names_a_backend_module():
    for name, info in FRAMEWORKS.items():
        assert info.name == name and info.module.startswith("gmpo_plugins.compare.backends")


def test_core_backend_is_the_registry_loss():
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.randn(3, 5, generator=generator, requires_grad=True)
    old = torch.randn(3, 5, generator=generator)
    advantages = torch.tensor([1.0, -0.5, 0.0])
    mask = torch.ones(3, 5, dtype=torch.bool)
    batch = BatchInfo(dp_size=1, global_batch_size=3, global_num_tokens=15)
    hparams = get_loss("gmpo").resolve({})
    loss, metrics = CoreBackend().policy_loss(
        PolicyLossCall(
            log_probs=log_probs,
            old_log_probs=old,
            advantages=advantages,
            mask=mask,
            loss_name="gmpo",
            hparams=hparams,
            batch_info=batch,
        )
    )
    expected = get_loss("gmpo")(LossInputs(log_probs, old, advantages, mask), batch)
    assert torch.equal(loss, expected.loss)
    assert metrics.keys() == expected.metrics.keys()
