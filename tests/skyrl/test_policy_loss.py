"""Our losses through SkyRL's own normalisation equal the core's whole-batch loss and
gradient: SkyRL's ``apply_loss_reduction_to_advantages_minibatch`` on the global
mini-batch, the loss called per micro-batch from the registry SkyRL's worker uses, the
worker's ``* dp_size`` and the data-parallel average (``helpers.skyrl_step``)."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins.adapters.skyrl.options import accepted_reductions
from gmpo_plugins.core.registry import get_loss

from ..registry_names import adapter_losses, builtin_losses
from .helpers import algorithm_config, core_hparams, core_step, make_batch, skyrl_step

EPS = {"log": (0.3, 0.35), "ratio": (0.2, 0.28)}
LINEAR = [  # the losses SkyRL can call (topr: no rewards) and express (linear in the advantages)
    name for name in builtin_losses() if get_loss(name).linear_in_advantages and name in adapter_losses("SkyRL")
]
CASES = [(name, reduction) for name in LINEAR for reduction in accepted_reductions(get_loss(name))]
LAYOUTS = [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2)]  # (dp_size, micro-batches per rank)


def _config(name: str, reduction: str, **fields):
    spec = get_loss(name)
    low, high = EPS[spec.clip_space or "ratio"]
    return algorithm_config(name, reduction, eps_clip_low=low, eps_clip_high=high, **fields)


def _close(got: float, grad: torch.Tensor, want: float, want_grad: torch.Tensor, tol: float = 1e-6) -> None:
    assert abs(got - want) <= tol * max(1.0, abs(want)), (got, want)
    scale = max(1.0, float(want_grad.abs().max()))
    assert float((grad - want_grad).abs().max()) <= tol * scale


def test_every_builtin_loss_has_a_reduction_case():
    assert {name for name, _ in CASES} == set(LINEAR)
    assert {reduction for _, reduction in CASES} == {"token_mean", "sequence_mean", "seq_mean_token_sum_norm"}


@pytest.mark.parametrize("spread", [0.3, 3.0], ids=["near", "far"])
@pytest.mark.parametrize("name,reduction", CASES)
def test_loss_and_gradient_equal_the_core(registered, name, reduction, spread):
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    batch = make_batch(spread)
    config = _config(name, reduction)
    rollout = batch["rollout_logprobs"]  # read by decoupled_ppo and m2po only
    want, want_grad, _ = core_step(name, batch, core_hparams(name, config), rollout_log_probs=rollout)
    assert want_grad.abs().max() > 0
    fn = PolicyLossRegistry.get("gmpo_plugins." + name)  # the bare name may be SkyRL's own
    layouts = LAYOUTS if get_loss(name).split_invariant else LAYOUTS[:1]  # m2po: the micro-batch's moment
    for dp_size, micro_batches in layouts:
        got, grad = skyrl_step(fn, batch, config, dp_size=dp_size, micro_batches=micro_batches, rollout=True)
        _close(got, grad, want, want_grad)


def test_float32_inputs_within_tolerance(registered):
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    batch = make_batch(dtype=torch.float32)
    config = _config("gmpo", "sequence_mean")
    want, want_grad, _ = core_step("gmpo", batch, core_hparams("gmpo", config))
    got, grad = skyrl_step(PolicyLossRegistry.get("gmpo"), batch, config, dp_size=2, micro_batches=2)
    _close(got, grad, want, want_grad)


def test_gmpo_eps_is_log_space(registered):
    """eps_clip_low/high = 0.4 is the paper's log-space bound: a token at log ratio 0.5
    (ratio 1.65, outside e^0.4 = 1.49) with A > 0 is clipped, one at 0.3 is not."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    old = torch.zeros(1, 2, dtype=torch.float64)
    new = torch.tensor([[0.5, 0.3]], dtype=torch.float64, requires_grad=True)
    config = algorithm_config("gmpo", "sequence_mean", eps_clip_low=0.4, eps_clip_high=0.4)
    # SkyRL's sequence_mean: A' = A / (N |o|) = 1 / (1 * 2)
    loss, metrics = PolicyLossRegistry.get("gmpo")(
        new, old, torch.full((1, 2), 0.5, dtype=torch.float64), config=config, loss_mask=torch.ones(1, 2)
    )
    loss.backward()
    # s = (min(0.5, 0.4) + 0.3) / 2 = 0.35; loss = -A * e^0.35; only the unclipped token has gradient
    assert float(loss.detach()) == pytest.approx(-math.exp(0.35), abs=1e-12)
    assert new.grad[0, 0] == 0 and float(new.grad[0, 1]) == pytest.approx(-math.exp(0.35) / 2, abs=1e-12)
    assert metrics["clip_ratio"] == pytest.approx(0.5) and metrics["gmpo/clip_frac_high"] == pytest.approx(0.5)


@pytest.mark.parametrize("kind", ["token", "sequence"])
def test_tis_weights_are_skyrl_truncated_ratios(registered, kind):
    """off_policy_correction.tis_ratio_type: the core gets SkyRL's truncated IS ratio
    min(exp(old - rollout), cap), per token or per sequence (product), as its IS weights."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
    from skyrl.train.config.config import OffPolicyCorrectionConfig

    batch = make_batch()
    correction = OffPolicyCorrectionConfig(
        tis_ratio_type=kind, token_tis_ratio_clip_high=1.1, sequence_tis_ratio_clip_high=1.5
    )
    config = _config("grpo", "sequence_mean", off_policy_correction=correction)
    log_ratio = (batch["old_log_probs"] - batch["rollout_logprobs"]) * batch["loss_mask"]
    if kind == "token":
        weights = log_ratio.exp().clamp(max=1.1)
    else:
        weights = log_ratio.sum(-1).exp().clamp(max=1.5)
    assert (weights < 1.1).any() and (weights >= 1.1).any()
    want, want_grad, _ = core_step("grpo", batch, core_hparams("grpo", config), rollout_is_weights=weights)
    got, grad = skyrl_step(PolicyLossRegistry.get("grpo"), batch, config, dp_size=2, micro_batches=2, rollout=True)
    _close(got, grad, want, want_grad)


def test_grpo_equals_skyrl_regular_on_moderate_ratios(registered):
    """Cross-check of the translation: on ratios inside SkyRL's exp guard, our grpo and
    SkyRL's own ``regular`` (token-level PPO clip) give the same loss and gradient under
    every reduction, from the same pre-scaled advantages."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    batch = make_batch(1.0)
    for reduction in ("token_mean", "sequence_mean", "seq_mean_token_sum_norm"):
        config = _config("grpo", reduction)
        ours = skyrl_step(PolicyLossRegistry.get("grpo"), batch, config, micro_batches=2)
        regular = algorithm_config(
            "regular", reduction, eps_clip_low=config.eps_clip_low, eps_clip_high=config.eps_clip_high
        )
        theirs = skyrl_step(PolicyLossRegistry.get("regular"), batch, regular, micro_batches=2)
        _close(*ours, *theirs)
