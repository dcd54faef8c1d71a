"""Named loss settings: grpo_clip_wider is grpo at GMPO's ratio band, hand-checked."""

import math

import pytest
import torch

from gmpo_plugins import LossInputs, get_loss
from gmpo_plugins.compare.experiment.settings import registry_name, resolve_loss
from gmpo_plugins.core.registry import UnknownLossError


def test_grpo_clip_wider_is_grpo_at_gmpos_band():
    name, hparams = resolve_loss("grpo_clip_wider")
    assert name == "grpo" and registry_name("grpo_clip_wider") == "grpo"
    # ratio bounds 1 - eps_low = e^-0.4 = 0.67032, 1 + eps_high = e^0.4 = 1.49182
    assert 1 - hparams["eps_low"] == pytest.approx(0.670320, abs=1e-6)
    assert 1 + hparams["eps_high"] == pytest.approx(1.491825, abs=1e-6)
    assert {k: v for k, v in hparams.items() if not k.startswith("eps")} == {
        k: v for k, v in get_loss("grpo").defaults.items() if not k.startswith("eps")
    }
    # one token, A = 1, ratio e^0.45 = 1.568: clipped at e^0.4 (loss -1.49182, no gradient);
    # at the standard clip it is clipped at 1.2 (loss -1.2)
    log_probs = torch.tensor([[0.45]], dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(
        log_probs, torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, dtype=torch.float64), torch.ones(1, 1).bool()
    )
    assert get_loss(name)(inputs, **hparams).loss.item() == pytest.approx(-math.exp(0.4), rel=1e-12)
    assert get_loss("grpo")(inputs).loss.item() == pytest.approx(-1.2, rel=1e-12)


def test_a_registry_loss_is_its_own_setting_and_unknown_names_are_refused():
    assert resolve_loss("gmpo") == ("gmpo", get_loss("gmpo").resolve({}))
    assert registry_name("gspo") == "gspo"
    with pytest.raises(UnknownLossError):
        resolve_loss("grpo_clip_widest")
