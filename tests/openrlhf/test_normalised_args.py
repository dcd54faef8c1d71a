"""``gmpo-openrlhf`` checks the arguments as train_ppo_ray's ``train(args)`` receives them, after
OpenRLHF's own normalisation in its ``__main__`` block (``cli.check_args``, at the start of ``train``).

Every IS-correction combination OpenRLHF's parser accepts (each choice of ``--algo.advantage.is_correction_level``,
``_mode`` and ``_gating``, one threshold or two) goes through ``gmpo-openrlhf``'s parsing with a registry loss:
it is accepted exactly where OpenRLHF's own ``PolicyLoss`` (a pristine copy, ``ppo``) accepts the arguments
OpenRLHF normalised, and refused elsewhere with a one-line usage error naming the flags, never a traceback.
FlashREINFORCE's setting (sequence level, ``binary_kl`` gating, one threshold, which OpenRLHF turns into
``[0, delta]``) then trains in OpenRLHF's own ``training_step``: ``gmpo_plugins.grpo`` gives ppo's loss and
gradients with the same correction.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from gmpo_plugins.adapters.openrlhf.cli import openrlhf_parser, parse_args, train_args
from tests.openrlhf.test_cli import GROUP

IS_FLAGS = ("level", "mode", "gating")
THRESHOLDS = (["0.01"], ["0.5", "5.0"])  # one value (an upper bound: OpenRLHF prepends 0), or LOW HIGH
FLASH_REINFORCE = {"level": "seq", "mode": "mask", "gating": "binary_kl", "threshold": ["0.01"]}


def _choices() -> dict[str, list[str]]:
    parser = openrlhf_parser()
    found = {
        action.dest.rsplit("_", 1)[1]: list(action.choices)
        for action in parser._actions
        if action.dest in {f"algo.advantage.is_correction_{flag}" for flag in IS_FLAGS}
    }
    assert set(found) == set(IS_FLAGS), found
    return found


def _argv(loss: str, level: str, mode: str, gating: str, threshold: list[str]) -> list[str]:
    correction = "--algo.advantage.is_correction_"
    return [
        "--actor.policy_loss_type", loss, *GROUP,
        f"{correction}level", level, f"{correction}mode", mode, f"{correction}gating", gating,
        f"{correction}threshold", *threshold,
    ]  # fmt: skip


def _openrlhf_accepts(policy_loss, args) -> bool:
    """Whether OpenRLHF's own PolicyLoss, built as ActorPPOTrainer builds it, accepts ``args``."""
    advantage = args.algo.advantage
    try:
        policy_loss(
            clip_eps_low=args.actor.eps_clip_low_high[0],
            clip_eps_high=args.actor.eps_clip_low_high[1],
            dual_clip=args.actor.dual_clip,
            token_level_loss=args.actor.loss_agg_mode == "token-mean",
            policy_loss_type=args.actor.policy_loss_type,
            is_correction_level=advantage.is_correction_level,
            is_correction_mode=advantage.is_correction_mode,
            is_correction_gating=advantage.is_correction_gating,
            is_correction_threshold=advantage.is_correction_threshold,
        )
    except (ValueError, AssertionError):
        return False
    return True


def test_every_is_correction_openrlhf_accepts_is_checked_after_its_normalisation(pristine_loss_module, capsys):
    choices = _choices()
    accepted, refused = [], []
    for values in itertools.product(*(choices[flag] for flag in IS_FLAGS), THRESHOLDS):
        setting = dict(zip((*IS_FLAGS, "threshold"), values, strict=True))
        ppo = train_args(_argv("ppo", **setting))
        assert len(ppo.algo.advantage.is_correction_threshold) == 2  # normalised by OpenRLHF
        capsys.readouterr()
        try:
            parse_args(_argv("gmpo", **setting))
        except SystemExit as exc:
            err = capsys.readouterr().err
            assert exc.code == 2 and "Traceback" not in err, (setting, err)
            (line,) = [row for row in err.splitlines() if not row.startswith(("usage:", " "))]
            assert line.startswith("gmpo-openrlhf: error: gmpo_plugins: OpenRLHF's PolicyLoss refuses --"), line
            assert "--algo.advantage.is_correction_" in line, line
            refused.append(setting)
        else:
            accepted.append(setting)
        assert (setting in accepted) == _openrlhf_accepts(pristine_loss_module.PolicyLoss, ppo), setting
    assert FLASH_REINFORCE in accepted
    assert len(accepted) + len(refused) == 2 * len(list(itertools.product(*choices.values())))
    assert refused  # OpenRLHF refuses some (a clipped sequence statistic, a divergence with a lower bound)


def test_flash_reinforce_threshold_is_openrlhfs_upper_bound():
    args = train_args(_argv("gmpo", **FLASH_REINFORCE))
    assert args.algo.advantage.is_correction_threshold == [0.0, 0.01]
    assert args.actor.eps_clip_low_high == (0.2, 0.2)  # --actor.eps_clip twice, OpenRLHF's rule


def test_a_divergence_with_a_lower_bound_names_the_flags(loss_module, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(_argv("gmpo", "seq", "mask", "binary_kl", ["0.5", "5.0"]))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert (
        "gmpo-openrlhf: error: gmpo_plugins: OpenRLHF's PolicyLoss refuses --algo.advantage.is_correction_gating "
        "binary_kl: is_correction_gating=binary_kl takes an upper bound only (a single delta)"
    ) in err


def _flash_reinforce_step(tiny, loss: str):
    """metrics and gradients of one OpenRLHF training_step with FlashREINFORCE's correction (rollout
    log-probs: the old ones moved by N(0, 0.02), so the per-row binary KL falls on both sides of 1e-4)."""
    args = train_args(_argv(loss, "seq", "mask", "binary_kl", ["1e-4"]))
    actor = tiny.build_actor()
    trainer, strategy = tiny.build_trainer(args, actor)
    experience = tiny.build_experience(actor)
    noise = 0.02 * torch.randn(experience.action_log_probs.shape, generator=torch.Generator().manual_seed(1))
    experience.rollout_log_probs = (experience.action_log_probs + noise) * experience.action_mask
    info = tiny.loss_batch_info(strategy, experience)
    status = trainer.training_step(experience, kl_ctl=0.01, step=0, loss_batch_info=info)
    return status["metrics"], strategy.last_grads


def test_flash_reinforce_trains_a_registry_loss_as_openrlhfs_ppo(tiny_openrlhf):
    want, want_grads = _flash_reinforce_step(tiny_openrlhf, "ppo")
    got, got_grads = _flash_reinforce_step(tiny_openrlhf, "gmpo_plugins.grpo")
    filtered = float(torch.as_tensor(want["is_filter_ratio"]).mean())
    assert 0.0 < filtered < 1.0, filtered  # the gate drops some rows and keeps others
    for name in ("policy_loss", "is_filter_ratio", "vllm_kl"):
        torch.testing.assert_close(torch.as_tensor(got[name]), torch.as_tensor(want[name]), rtol=1e-6, atol=1e-7)
    assert want_grads.keys() == got_grads.keys() and want_grads
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-5, atol=1e-6)


class PolicyLossOf0104(torch.nn.Module):
    """Stands in for OpenRLHF 0.10.4's ``PolicyLoss`` (its constructor's parameters, its
    ``vllm_is_*`` correction arguments; 0.10.4 cannot be installed beside 0.11.2), whose parser
    has no ``--actor.loss_agg_mode`` either."""

    def __init__(
        self,
        clip_eps_low: float = 0.2,
        clip_eps_high: float = 0.2,
        dual_clip: float | None = None,
        token_level_loss: bool = True,
        policy_loss_type: str = "ppo",
        enable_vllm_is_correction: bool = False,
        vllm_is_truncated_threshold: list | None = None,
        vllm_is_correction_type: str = "tis",
    ) -> None:
        super().__init__()


def test_another_releases_policy_loss_is_refused_naming_its_signature_not_with_a_traceback(monkeypatch):
    """A registry loss under a PolicyLoss whose constructor is not 0.11.2's: the check refuses it
    naming the signature, before it reads an argument that release does not have."""
    import openrlhf.models

    from gmpo_plugins.adapters.openrlhf.cli import check_args
    from gmpo_plugins.adapters.openrlhf.version import UnsupportedOpenRLHFVersionError

    args = train_args(["--actor.policy_loss_type", "gmpo", *GROUP])
    del args.actor.loss_agg_mode  # 0.10.4's parser has no such flag
    monkeypatch.setattr(openrlhf.models, "PolicyLoss", PolicyLossOf0104)
    with pytest.raises(UnsupportedOpenRLHFVersionError, match=r"PolicyLoss.__init__ has parameters .*vllm_is_"):
        check_args(args)
