"""gmpo-plugins parity: the core passes, a perturbed adapter fails, a reference only reports."""

import dataclasses

import pytest
import torch

from gmpo_plugins.cli.main import main
from gmpo_plugins.compare.backends.base import CoreBackend, PolicyLossCall
from gmpo_plugins.compare.parity import harness
from gmpo_plugins.core.types import BatchInfo


class Perturbed(CoreBackend):
    """The core with the loss scaled by (1 + 1e-4): a subtly wrong adapter."""

    name = "perturbed"

    def policy_loss(self, call: PolicyLossCall):
        loss, metrics = super().policy_loss(call)
        return loss * (1 + 1e-4), metrics


class LocalMean(CoreBackend):
    """Ignores the global counts (normalises per micro-batch), like verl's geo_mean."""

    name = "local-mean"

    def policy_loss(self, call: PolicyLossCall):
        return super().policy_loss(dataclasses.replace(call, batch_info=BatchInfo()))


class WrongMetric(CoreBackend):
    name = "wrong-metric"

    def policy_loss(self, call: PolicyLossCall):
        loss, metrics = super().policy_loss(call)
        return loss, {**metrics, "clip_frac": metrics["clip_frac"] + 0.01}


class Raising(CoreBackend):
    name = "raising"

    def policy_loss(self, call: PolicyLossCall):
        if not call.mask.any(-1).all():
            raise ValueError("empty row")
        return super().policy_loss(call)


class NaNLoss(CoreBackend):
    name = "nan"

    def policy_loss(self, call: PolicyLossCall):
        loss, metrics = super().policy_loss(call)
        return loss * float("nan"), metrics


@pytest.fixture
def registered(monkeypatch):
    targets = []
    monkeypatch.setattr(harness, "_REGISTERED", targets)
    return targets


def test_cases_are_hard():
    cases = {case.name: case for case in harness.parity_cases()}
    assert set(cases) == {"near", "far", "guard", "zero_adv", "bf16", "is_weights"}
    weights = cases["is_weights"].rollout_is_weights[cases["is_weights"].mask]
    assert weights.min() < 0.5 and weights.max() > 1.5  # token weights that differ within a sequence
    near = cases["near"]
    assert (near.mask.sum(1) == 0).any()  # an empty row
    assert len(set(near.mask.sum(1).tolist())) >= 6  # mixed lengths
    assert (near.advantages > 0).any() and (near.advantages < 0).any() and (near.advantages == 0).any()
    assert cases["zero_adv"].advantages.eq(0).all()
    assert cases["bf16"].log_probs.dtype == torch.bfloat16
    far = cases["far"]
    log_ratio = (far.log_probs - far.old_log_probs)[far.mask]
    assert log_ratio.max() > 10 and log_ratio.min() < -10  # far outside e^+-0.4 and 1 +- 0.2
    guard = cases["guard"]
    assert ((guard.log_probs - guard.old_log_probs)[guard.mask].abs() > 20).sum() == 2


def test_core_against_itself_is_exact():
    row = harness.compare_target(harness.ParityTarget("core", "adapter", CoreBackend()), "gmpo", harness.parity_cases())
    assert row.ok and row.d_loss == 0 and row.d_grad == 0 and row.d_metric == 0
    assert row.d_split <= 1e-6


@pytest.mark.parametrize(
    ("backend", "what"),
    [
        (Perturbed(), "loss on near"),
        (LocalMean(), "2-way split on near"),
        (WrongMetric(), "metric clip_frac on near"),
        (Raising(), "raised on near: ValueError: empty row"),
        (NaNLoss(), "loss on near: nan"),
    ],
)
def test_differences_are_detected(backend, what):
    row = harness.compare_target(harness.ParityTarget(backend.name, "adapter", backend), "gmpo", harness.parity_cases())
    assert not row.ok
    assert any(failure.startswith(what) for failure in row.failures), row.failures


def test_parity_passes_on_installed_adapters(capsys, registered):
    assert main(["parity"]) == 0
    out = capsys.readouterr().out
    assert "0 adapter row(s) failed" in out
    for loss in ("gmpo", "grpo", "gspo", "dapo"):
        assert f"│ {loss} " in out


def test_perturbed_adapter_fails_parity(capsys, registered):
    registered.append(harness.ParityTarget("perturbed adapter", "adapter", Perturbed()))
    assert main(["parity", "--losses", "gmpo,grpo"]) == 1
    out = capsys.readouterr().out
    assert "FAIL perturbed adapter / gmpo" in out and "2 adapter row(s) failed" in out


def test_differing_reference_is_reported_not_fatal(capsys, registered):
    registered.append(harness.ParityTarget("perturbed reference", "reference", Perturbed()))
    assert main(["parity", "--losses", "gmpo"]) == 0
    assert "reference differs perturbed reference / gmpo" in capsys.readouterr().out
