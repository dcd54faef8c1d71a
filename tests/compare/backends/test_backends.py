"""Framework registry, where a framework runs, and the translations backends share."""

import importlib.util
import os
import sys

import pytest
import torch

from gmpo_plugins.compare.backends.base import (
    FRAMEWORKS,
    BackendError,
    CoreBackend,
    OwnLosses,
    PolicyLossCall,
    Runner,
    adapter_and_own_targets,
    framework_info,
    load_backend,
    refuse_uncarried,
    resolve_runner,
    strip_prefix,
)
from gmpo_plugins.core.registry import UnknownLossError, get_loss
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


def test_a_relative_env_var_is_the_callers_path_made_absolute(tmp_path, monkeypatch):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    os.symlink(sys.executable, python)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_CORE", "venv/bin/python")
    assert resolve_runner("core") == Runner("core", str(python))
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_CORE", "other/bin/python")
    with pytest.raises(BackendError, match="GMPO_PLUGINS_PYTHON_CORE='other/bin/python' is not an executable"):
        resolve_runner("core")


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl installed here")
def test_nox_virtualenv_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv("GMPO_PLUGINS_PYTHON_VERL", raising=False)
    with pytest.raises(BackendError, match="run `python3 -m nox -r -s verl` first"):
        resolve_runner("verl", cwd=tmp_path)
    python = tmp_path / ".nox" / "verl" / "bin" / "python"
    python.parent.mkdir(parents=True)
    os.symlink(sys.executable, python)
    assert resolve_runner("verl", cwd=tmp_path) == Runner("verl", str(python))


def test_every_framework_names_a_backend_module():
    for name, info in FRAMEWORKS.items():
        assert info.name == name and info.module.startswith("gmpo_plugins.compare.backends.")


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


def _call(advantages: torch.Tensor, **extra) -> PolicyLossCall:
    mask = torch.tensor([[True, True, False], [True, False, False]])
    return PolicyLossCall(torch.zeros(2, 3), torch.zeros(2, 3), advantages, mask, "gmpo", {}, BatchInfo(), **extra)


def test_token_advantages_spread_over_the_mask():
    call = _call(torch.tensor([1.5, -2.0]))
    expected = torch.tensor([[1.5, 1.5, 0.0], [-2.0, 0.0, 0.0]])
    for mask in (call.mask, call.mask.long(), call.mask.float()):  # each framework's mask dtype
        assert torch.equal(call.token_advantages(mask), expected)
    per_token = torch.arange(6.0).view(2, 3)
    assert _call(per_token).token_advantages(call.mask) is per_token


def test_backends_without_is_weights_refuse_them():
    _call(torch.ones(2)).require_no_rollout_is_weights("openrlhf")  # no weights: nothing to refuse
    with pytest.raises(BackendError, match=r"^openrlhf: rollout_is_weights: .*; expected None$"):
        _call(torch.ones(2), rollout_is_weights=torch.ones(2, 3)).require_no_rollout_is_weights("openrlhf")


def test_uncarried_hyper_parameters_must_keep_their_defaults():
    carried = ["eps_low", "eps_high"]
    refuse_uncarried("fw", "its config", "gmpo", {"eps_low": 0.3, "kl_beta": 0.0}, carried)  # kl_beta: the default
    message = (
        r"^fw: gmpo hyper-parameter kl_beta=0.5 cannot be set through its config "
        r"\(only \['eps_high', 'eps_low'\]\); keep its default 0.0$"
    )
    with pytest.raises(BackendError, match=message):
        refuse_uncarried("fw", "its config", "gmpo", {"eps_low": 0.3, "kl_beta": 0.5}, carried)


def test_strip_prefix_keeps_only_prefixed_metrics():
    assert strip_prefix({"actor/gmpo/clip_frac": 0.25, "actor/pg_loss": 1.0}, "actor/gmpo/") == {"clip_frac": 0.25}


def test_own_losses_and_their_parity_targets():
    own = OwnLosses({"grpo": "ppo", "gspo": "gspo"}, "ppo/gspo", "the framework's own ppo and gspo")
    assert own.supports("grpo") and not own.supports("gmpo")
    with pytest.raises(UnknownLossError):
        own.supports("nope")
    assert own.loss_type("grpo", True, "pre.") == "ppo" and own.loss_type("grpo", False, "pre.") == "pre.grpo"
    built: list[bool] = []

    def backend(own_losses: bool) -> CoreBackend:
        built.append(own_losses)
        return CoreBackend()

    targets = adapter_and_own_targets("fw", backend, "adapter note", own)
    assert built == []  # backends are built when their target is reached
    adapter, reference = targets
    assert (adapter.label, adapter.kind, adapter.note) == ("fw adapter", "adapter", "adapter note")
    assert (reference.label, reference.kind, reference.note) == (
        "fw ppo/gspo (own)",
        "reference",
        "the framework's own ppo and gspo",
    )
    assert built == [False, True]
