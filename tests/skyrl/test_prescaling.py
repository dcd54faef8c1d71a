"""SkyRL drift: the adapter relies on SkyRL's trainer pre-scaling the advantages
(``apply_loss_reduction_to_advantages_minibatch``). The driver checks it on the installed
trainer's own code path; a SkyRL that moved the normalisation elsewhere is refused, by
``register_losses`` and by the entry point for runs of a registry loss only.

The drift is simulated in SkyRL's own trainer module (monkeypatched for the test):

    not scaled      ``RayPPOTrainer._normalize_advantages`` hands the advantages on unscaled
                    (normalisation moved into SkyRL's own losses)
    token mean      ``apply_loss_reduction_to_advantages_minibatch`` divides by the token
                    count whatever the reduction (sequence_mean no longer per sequence)
"""

from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest

from gmpo_plugins.adapters.skyrl import entrypoint, register_losses
from gmpo_plugins.adapters.skyrl.prescaling import check_prescaling
from gmpo_plugins.adapters.upstream import UpstreamDriftError

VERSION = importlib.metadata.version("skyrl")


def not_scaled(self, data, mini_batch_boundaries, prompt_boundaries=None):
    return data


def token_mean_always(advantages, loss_mask, loss_reduction, micro_batch_size, max_seq_len, prompt_boundaries=None):
    return advantages / loss_mask.sum().clamp(min=1)


@pytest.fixture(params=["not scaled", "token mean"])
def drift(request, monkeypatch):
    import skyrl.train.trainer as trainer_module

    if request.param == "not scaled":
        monkeypatch.setattr(trainer_module.RayPPOTrainer, "_normalize_advantages", not_scaled)
        return "loss_reduction=token_mean", "A / 7 per token", "[1.0, -2.0, -2.0, 0.5, 0.5, 0.5, 0.5]"
    monkeypatch.setattr(trainer_module, "apply_loss_reduction_to_advantages_minibatch", token_mean_always)
    # sequence_mean: rows of 1, 2, 4 tokens scaled by 1/7 instead of 1/(3 |o_i|), times |o_i|
    return "loss_reduction=sequence_mean", "A / 3 per token", "[0.14285714285714285, -0.5714285714285714"


def test_the_installed_skyrl_pre_scales_as_the_adapter_expects():
    check_prescaling()


def test_register_losses_refuses_a_skyrl_that_does_not_pre_scale(drift):
    reduction, expected, found = drift
    with pytest.raises(UpstreamDriftError) as error:
        register_losses()
    message = str(error.value)
    assert message.startswith(
        f"gmpo_plugins: skyrl {VERSION} does not pre-scale the advantages the way the SkyRL adapter"
    )
    assert f"with {reduction}, the advantages RayPPOTrainer._execute_training_step hands the policy workers" in message
    assert f"should give {expected} once the adapter undoes SkyRL's scaling" in message
    assert f"found advantages {found}" in message and "skyrl>=0.3.0,<0.5" in message
    print(message)


def _main_base_stand_in(monkeypatch, ran: list) -> None:
    """Stand-in for SkyRL's main_base (it starts a GPU run): records that it was reached."""
    stand_in = types.ModuleType("skyrl.train.entrypoints.main_base")
    stand_in.main = lambda: ran.append(list(sys.argv))
    monkeypatch.setitem(sys.modules, "skyrl.train.entrypoints.main_base", stand_in)


def test_entry_point_refuses_a_registry_loss_on_the_drifted_skyrl(drift, monkeypatch, capsys):
    ran: list = []
    _main_base_stand_in(monkeypatch, ran)
    with pytest.raises(SystemExit) as exit_info:
        entrypoint.main(
            [
                "trainer.logger=console",
                "trainer.algorithm.policy_loss_type=gmpo",
                "trainer.algorithm.loss_reduction=sequence_mean",
            ]
        )
    assert exit_info.value.code == 2 and not ran
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"invalid configuration: gmpo_plugins: skyrl {VERSION} does not pre-scale the advantages" in line


def test_entry_point_runs_skyrls_own_loss_on_the_drifted_skyrl(drift, monkeypatch):
    ran: list = []
    _main_base_stand_in(monkeypatch, ran)
    entrypoint.main(["trainer.logger=console", "trainer.algorithm.policy_loss_type=regular"])
    assert len(ran) == 1
