"""``gmpo-plugins parity`` / ``compare`` with trl installed: the TRL adapter backend
(``RegistryGRPOTrainer._compute_loss``) equals the core on the parity command's hard cases,
whole and split, and TRL's own GMPO is listed as a reference whose differences from the
core are the documented ones."""

from __future__ import annotations

import pytest
import torch

from gmpo_plugins import list_losses
from gmpo_plugins.compare.backends.base import CoreBackend, load_backend
from gmpo_plugins.compare.backends.trl import TrlBackend, trl_settings
from gmpo_plugins.compare.backends.trl_gmpo import TrlGMPOBackend
from gmpo_plugins.compare.parity.harness import ParityTarget, compare_target, discover_targets, evaluate, parity_cases

from ..registry_names import adapter_losses, refused_losses


def test_parity_discovers_the_trl_adapter_and_reference():
    targets, skipped = discover_targets()
    by_label = {target.label: target for target in targets}
    assert by_label["trl adapter"].kind == "adapter" and isinstance(by_label["trl adapter"].backend, TrlBackend)
    assert by_label["trl GMPOTrainer"].kind == "reference"
    assert isinstance(by_label["trl GMPOTrainer"].backend, TrlGMPOBackend)
    assert not [label for label, _ in skipped if label.startswith("trl")]
    assert isinstance(load_backend("trl"), TrlBackend)


def test_losses_needing_an_input_trl_is_not_given_are_not_offered():
    """The adapter refuses the losses reading rollout log-probs; the backend also those reading
    rewards (``topr``), which the adapter takes from TRL's batch and a ``PolicyLossCall`` lacks."""
    backend = TrlBackend()
    assert [spec.name for spec in list_losses() if not backend.supports(spec.name)] == [
        spec.name for spec in list_losses() if spec.requires
    ]
    assert {"decoupled_ppo", "m2po"} <= set(refused_losses("trl")) and "topr" not in refused_losses("trl")


@pytest.mark.parametrize("loss_name", [name for name in adapter_losses("trl") if TrlBackend().supports(name)])
def test_trl_backend_matches_the_core_on_parity_cases(loss_name):
    row = compare_target(ParityTarget("trl adapter", "adapter", TrlBackend()), loss_name, parity_cases())
    assert row.ok, row.failures
    assert row.metric_key  # metrics were compared


def test_settings_round_trip_through_grpo_config():
    assert trl_settings("gmpo", {"eps_low": 0.3, "eps_high": 0.5, "kl_beta": 0.0, "log_ratio_bound": 10.0}) == (
        {"use_bias_correction_kl": False, "epsilon": 0.3, "epsilon_high": 0.5, "beta": 0.0},
        {"log_ratio_bound": 10.0},
    )
    backend = TrlBackend()
    hparams = {
        "eps_low": 0.2,
        "eps_high": 0.28,
        "dual_clip": 3.0,
        "reduction": "token-mean",
        "norm_length": 12,
        "kl_beta": 0.0,
        "kl_estimator": "k3",
        "log_ratio_bound": 20.0,
    }
    args, loss_hparams = backend._config("grpo", hparams)
    terms_off = {"entropy_coef": 0.0, "top_entropy_quantile": 1.0}  # GRPOConfig's defaults, which every loss receives
    assert loss_hparams == {**hparams, **terms_off} and args.max_completion_length == 12 and args.epsilon_high == 0.28


def test_trl_gmpo_reference_differs_only_as_documented():
    """Per parity case, TRL's GMPO minus the core: the empty row's -A_i / B in the loss value
    (gradients and clip metrics equal) where |log ratio| < 20, up to bfloat16 rounding of
    TRL's loss in the bf16 case; the overflow guard case differs in the gradient."""
    cases = {case.name: case for case in parity_cases()}
    for name in ("near", "far", "zero_adv"):
        case = cases[name]
        empty = ~case.mask.bool().any(-1)
        expected = float(-case.advantages[empty].sum()) / case.mask.shape[0]
        theirs, ours = evaluate(TrlGMPOBackend(), "gmpo", case), evaluate(CoreBackend(), "gmpo", case)
        assert abs((theirs.loss - ours.loss) - expected) <= 1e-6, name
        assert float((theirs.grad - ours.grad).abs().max()) <= 1e-6 * max(1.0, float(ours.grad.abs().max())), name
        assert all(abs(theirs.metrics[k] - ours.metrics[k]) <= 1e-6 for k in theirs.metrics), name
    bf16 = cases["bf16"]  # TRL computes in bfloat16 where the core promotes to float32
    theirs, ours = evaluate(TrlGMPOBackend(), "gmpo", bf16), evaluate(CoreBackend(), "gmpo", bf16)
    empty = ~bf16.mask.bool().any(-1)
    expected = float(-bf16.advantages[empty].float().sum()) / bf16.mask.shape[0]
    assert abs((theirs.loss - ours.loss) - expected) <= 1e-3
    assert all(abs(theirs.metrics[k] - ours.metrics[k]) <= 1e-6 for k in theirs.metrics)
    guard = cases["guard"]
    theirs, ours = evaluate(TrlGMPOBackend(), "gmpo", guard), evaluate(CoreBackend(), "gmpo", guard)
    assert float(theirs.grad.abs().max()) > 1e6 > float(ours.grad.abs().max())
    assert torch.isfinite(ours.grad).all()
