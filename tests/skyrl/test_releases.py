"""The SkyRL release table (``adapters/skyrl/releases.py``): the installed release's row holds
SkyRL's own defaults, each row's CISPO band translates into the registry's cispo (checked
against SkyRL's own cispo through its ``PolicyLossRegistry``), and 0.4's ``cispo_anchor="rollout"``
takes the registry cispo's ratio against the rollout log-probs, as SkyRL's own cispo (loss and
gradient checked against it), refused by name for every other loss, beside TIS and without
rollout log-probs."""

from __future__ import annotations

import importlib.metadata
import json
from types import SimpleNamespace

import pytest
import torch

from gmpo_plugins import get_loss
from gmpo_plugins.adapters.compatibility import Spec
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.skyrl import SkyRLConfigError, options
from gmpo_plugins.adapters.skyrl.options import resolution_from_config
from gmpo_plugins.adapters.skyrl.releases import RELEASES, installed, release_for

from .helpers import algorithm_config, core_hparams, core_step, make_batch, skyrl_step

VERSION = importlib.metadata.version("skyrl")
CISPO = "gmpo_plugins.cispo"
ANCHOR = "trainer.algorithm.cispo.cispo_anchor"
HAS_ANCHOR = installed().cispo_anchor is not None
NEEDS_ANCHOR = pytest.mark.skipif(not HAS_ANCHOR, reason=f"skyrl {VERSION} has no cispo.cispo_anchor")


def test_the_installed_release_row_holds_skyrls_own_defaults():
    from skyrl.train.config import AlgorithmConfig

    cispo = AlgorithmConfig().cispo
    row = installed()
    assert VERSION.startswith(row.minor + ".")
    assert (cispo.cispo_eps_clip_low, cispo.cispo_eps_clip_high) == (row.cispo_eps_clip_low, row.cispo_eps_clip_high)
    assert getattr(cispo, "cispo_anchor", None) == row.cispo_anchor


@pytest.mark.parametrize(
    ("version", "minor"),
    [("0.3.0", "0.3"), ("0.3.7", "0.3"), ("0.4.0rc1", "0.4"), ("0.4.0", "0.4"), ("0.5.1", "0.4"), ("0.2.9", "0.3")],
)
def test_a_version_is_served_by_the_newest_row_at_or_below_it(version, minor):
    assert release_for(version).minor == minor
    assert release_for(None) is RELEASES[-1]


def _cispo_config(low: float, high: float, anchor: str | None = None) -> SimpleNamespace:
    """``trainer.algorithm`` as the adapter reads it, for any release (no SkyRL needed)."""
    cispo = SimpleNamespace(cispo_eps_clip_low=low, cispo_eps_clip_high=high)
    if anchor is not None:
        cispo.cispo_anchor = anchor
    return SimpleNamespace(loss_reduction="token_mean", cispo=cispo)


@pytest.mark.parametrize("row", RELEASES, ids=lambda row: row.minor)
@pytest.mark.parametrize(
    ("low", "eps_low"),
    [("default", None), (0.3, 0.3), (1.0, None), (1.5, None)],
    ids=["default", "0.3", "1.0", "1.5"],
)
def test_each_release_reads_its_cispo_band(monkeypatch, row, low, eps_low):
    """The release's default low and any low >= 1 (a lower bound <= 0) are the registry's no lower
    clip; the high offset is the registry's eps_high, labelled as SkyRL's default at the release's."""
    monkeypatch.setattr(options, "installed", lambda: row)
    low = row.cispo_eps_clip_low if low == "default" else low
    resolution = resolution_from_config(get_loss("cispo"), _cispo_config(low, row.cispo_eps_clip_high), CISPO)
    assert resolution.params().get("eps_low") == eps_low
    assert resolution.params()["eps_high"] == row.cispo_eps_clip_high
    field = "trainer.algorithm.cispo.cispo_eps_clip_high"
    assert f"eps_high={row.cispo_eps_clip_high!r} (framework default {field})" in resolution.line()


def test_a_low_of_zero_outside_03_is_refused_naming_the_field(monkeypatch):
    """0.4's explicit low 0.0 clamps the ratio below at 1, which the registry's eps_low (> 0)
    cannot express; in 0.3 it is the default, read as no lower clip."""
    monkeypatch.setattr(options, "installed", lambda: release_for("0.4.0"))
    with pytest.raises(SkyRLConfigError, match=r"trainer\.algorithm\.cispo\.cispo_eps_clip_low=0\.0"):
        resolution_from_config(get_loss("cispo"), _cispo_config(0.0, 4.0), CISPO)


def test_a_cispo_anchor_other_than_old_or_rollout_is_refused_by_name():
    with pytest.raises(SkyRLConfigError) as error:
        resolution_from_config(get_loss("cispo"), _cispo_config(1.0, 4.0, "behaviour"), CISPO)
    assert str(error.value) == (
        f"gmpo_plugins: {ANCHOR}='behaviour' is not supported by policy_loss_type={CISPO}: expected 'old' or 'rollout'"
    )


def test_the_rollout_anchor_is_the_cores_rollout_bypass_on_the_provenance_line():
    """cispo_anchor="rollout" -> rollout_bypass=True (old_log_probs := rollout_log_probs), named
    on the line the adapter logs; "old" (and 0.3's absent field) leaves the ratio at the old ones."""
    resolution = resolution_from_config(get_loss("cispo"), _cispo_config(1.0, 4.0, "rollout"), CISPO)
    assert resolution.params() == {"eps_high": 4.0, "reduction": "token-mean", "rollout_bypass": True}
    assert resolution.line().endswith(
        f"rollout_bypass=True (framework field {ANCHOR}='rollout': the ratio against rollout_logprobs)"
    )
    for anchor in ("old", None):
        assert (
            "rollout_bypass"
            not in resolution_from_config(get_loss("cispo"), _cispo_config(1.0, 4.0, anchor), CISPO).params()
        )


@pytest.mark.parametrize("name", ["gmpo", "grpo", "rollout_is", "decoupled_ppo"])
def test_the_rollout_anchor_with_any_other_loss_is_refused_by_name(name):
    """SkyRL reads cispo_anchor in its cispo only (its other losses ignore it:
    ``test_skyrls_other_losses_ignore_the_anchor``); the registry's other losses refuse it."""
    config = _cispo_config(1.0, 4.0, "rollout")
    config.loss_reduction = "sequence_mean" if get_loss(name).sequence_level else "token_mean"
    config.eps_clip_low = config.eps_clip_high = 0.2
    with pytest.raises(SkyRLConfigError) as error:
        resolution_from_config(get_loss(name), config, f"gmpo_plugins.{name}")
    assert str(error.value) == (
        f"gmpo_plugins: {ANCHOR}='rollout' is not supported by policy_loss_type=gmpo_plugins.{name}: SkyRL reads "
        f"it in its cispo only, and {name} is not a CISPO loss (its ratio is against the old log-probs). Set "
        f"{ANCHOR}='old'; to take {name}'s ratio against the rollout log-probs, set "
        f"{OVERRIDE_ENV}='{{\"rollout_bypass\": true}}'"
    )
    config.cispo.cispo_anchor = "old"
    assert resolution_from_config(get_loss(name), config, name).params()["eps_low"] == 0.2


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"rollout_bypass": False},
            f"gmpo_plugins: rollout_bypass is set both by {OVERRIDE_ENV} (False) and by {ANCHOR}='rollout' (True, "
            f"the ratio against the rollout log-probs) for policy_loss_type={CISPO}; set one of them",
        ),
        (
            {"rollout_is": "token"},
            f"gmpo_plugins: {ANCHOR}='rollout' and rollout_is='token' are not supported together by "
            f"policy_loss_type={CISPO}: the ratio against the rollout log-probs is already the off-policy "
            f"correction, and the IS weight would apply it twice. Remove rollout_is from {OVERRIDE_ENV}",
        ),
    ],
    ids=["bypass-off", "rollout-is"],
)
def test_an_override_against_the_rollout_anchor_is_refused_naming_both(monkeypatch, override, message):
    monkeypatch.setenv(OVERRIDE_ENV, json.dumps(override))
    with pytest.raises(SkyRLConfigError) as error:
        resolution_from_config(get_loss("cispo"), _cispo_config(1.0, 4.0, "rollout"), CISPO)
    assert str(error.value) == message
    monkeypatch.setenv(OVERRIDE_ENV, json.dumps({"rollout_bypass": True}))  # agrees with the anchor
    resolution = resolution_from_config(get_loss("cispo"), _cispo_config(1.0, 4.0, "rollout"), CISPO)
    assert resolution.params()["rollout_bypass"] is True
    assert f"(framework field {ANCHOR}='rollout'" in resolution.line()


def _skyrl_cispo(registered, low, anchor):
    """(ours, SkyRL's own) cispo loss and gradient through SkyRL's PolicyLossRegistry with SkyRL's
    token_mean scaling, float64, and the behaviour log-probs the ratio was taken against."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    row = installed()
    low = row.cispo_eps_clip_low if low == "default" else low
    config = algorithm_config("cispo", "token_mean")
    config.cispo.cispo_eps_clip_low = low
    if anchor is not None:
        config.cispo.cispo_anchor = anchor
    batch = make_batch(spread=0.8)
    mask = batch["loss_mask"]
    scaled = batch["advantages"] / mask.sum()
    results = []
    for name in (CISPO, "cispo"):
        log_probs = batch["log_probs"].clone().requires_grad_(True)
        loss, _ = PolicyLossRegistry.get(name)(
            log_probs,
            batch["old_log_probs"],
            scaled,
            config=config,
            loss_mask=mask,
            rollout_logprobs=batch["rollout_logprobs"] if anchor == "rollout" else None,
        )
        loss.backward()
        results.append((loss.detach(), log_probs.grad))
    behaviour = batch["rollout_logprobs" if anchor == "rollout" else "old_log_probs"]
    return results, low, batch, behaviour


@pytest.mark.parametrize("anchor", [None, pytest.param("rollout", marks=NEEDS_ANCHOR)], ids=["old", "rollout"])
@pytest.mark.parametrize("low", ["default", 0.3, 1.0])
def test_registry_cispo_matches_skyrls_own_where_the_band_is_expressible(registered, low, anchor):
    """Through SkyRL's PolicyLossRegistry with SkyRL's token_mean scaling, float64: the adapter's
    cispo gives SkyRL's own cispo's loss and gradient (within 1e-7: SkyRL's safe_exp_delta rounds
    the ratio to float32) whenever SkyRL's lower bound is inside (0, 1) or at/below 0; at 0.3's
    default low 0.0 (a bound at 1 that lifts every ratio below 1) they differ, by the adapter's
    reading of that default as no lower clip. The same with 0.4's cispo_anchor="rollout", where
    both take the ratio against the rollout log-probs."""
    ((ours, our_grad), (theirs, their_grad)), low, batch, behaviour = _skyrl_cispo(registered, low, anchor)
    mask = batch["loss_mask"]
    below_one = bool(((batch["log_probs"] - behaviour).exp() < 1)[mask != 0].any())
    assert below_one  # the batch reaches the lower side, so a clamp at 1 would show
    same = torch.allclose(ours, theirs, rtol=0, atol=1e-7) and torch.allclose(our_grad, their_grad, rtol=0, atol=1e-7)
    assert same is (low != 0.0), (float(ours), float(theirs))


@NEEDS_ANCHOR
@pytest.mark.parametrize("low", ["default", 0.3])
def test_the_rollout_anchor_is_the_core_cispo_with_old_log_probs_replaced(registered, low):
    """cispo_anchor="rollout" through SkyRL's pre-scaling, 2 ranks x 2 micro-batches: our cispo
    and SkyRL's own both equal the core's cispo on the whole mini-batch with old_log_probs :=
    rollout_logprobs, and differ from the old anchor (the clamp binds against the rollout ratio)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    config = algorithm_config("cispo", "token_mean")
    if low != "default":
        config.cispo.cispo_eps_clip_low = low
    config.cispo.cispo_anchor = "rollout"
    batch = make_batch(spread=0.8)
    rollout = {**batch, "old_log_probs": batch["rollout_logprobs"]}
    hparams = core_hparams("cispo", config)
    want, want_grad, _ = core_step("cispo", rollout, hparams)
    at_old, _, _ = core_step("cispo", batch, hparams)
    assert abs(want - at_old) > 1e-3, (want, at_old)
    ratio = (batch["log_probs"] - batch["rollout_logprobs"]).exp()[batch["loss_mask"] != 0]
    low_bound = 1 - config.cispo.cispo_eps_clip_low
    assert bool(((ratio > 1 + config.cispo.cispo_eps_clip_high) | (ratio < low_bound)).any())  # the clamp binds
    for name in (CISPO, "cispo"):
        got, grad = skyrl_step(PolicyLossRegistry.get(name), batch, config, dp_size=2, micro_batches=2, rollout=True)
        assert abs(got - want) <= 1e-7, (name, got, want)
        assert float((grad - want_grad).abs().max()) <= 1e-7, name


@NEEDS_ANCHOR
def test_the_rollout_anchor_without_rollout_log_probs_is_refused_naming_it(registered):
    """SkyRL passed no rollout_logprobs: refused naming the anchor at the call (SkyRL's own cispo
    asserts) and, with generator.sampling_params.logprobs=null, before SkyRL starts Ray."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
    from skyrl.train.config import SkyRLTrainConfig

    from gmpo_plugins.adapters.skyrl.entrypoint import check_config

    message = (
        f"gmpo_plugins: {ANCHOR}='rollout' takes the ratio of policy_loss_type={CISPO} against the rollout "
        "engine's log-probs (rollout_logprobs), which SkyRL passes to the loss only with "
        f"generator.sampling_params.logprobs=1; set it, or {ANCHOR}='old'"
    )
    config = algorithm_config("cispo", "token_mean")
    config.cispo.cispo_anchor = "rollout"
    batch = make_batch()
    with pytest.raises(SkyRLConfigError) as error:
        skyrl_step(PolicyLossRegistry.get(CISPO), batch, config, rollout=False)
    assert str(error.value) == message
    with pytest.raises(AssertionError, match="rollout_logprobs are required for cispo with cispo_anchor='rollout'"):
        skyrl_step(PolicyLossRegistry.get("cispo"), batch, config, rollout=False)
    cfg = SkyRLTrainConfig.from_cli_overrides(
        [
            f"trainer.algorithm.policy_loss_type={CISPO}",
            "trainer.algorithm.loss_reduction=token_mean",
            "trainer.algorithm.cispo.cispo_anchor=rollout",
            "trainer.logger=console",
            "generator.sampling_params.logprobs=null",
        ]
    )
    with pytest.raises(SkyRLConfigError) as error:
        check_config(cfg)
    assert str(error.value) == message


@NEEDS_ANCHOR
def test_the_rollout_anchor_beside_tis_is_refused_as_skyrl_refuses_it(registered):
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
    from skyrl.train.config.config import OffPolicyCorrectionConfig

    config = algorithm_config(
        "cispo", "token_mean", off_policy_correction=OffPolicyCorrectionConfig(tis_ratio_type="token")
    )
    config.cispo.cispo_anchor = "rollout"
    batch = make_batch()
    with pytest.raises(SkyRLConfigError) as error:
        skyrl_step(PolicyLossRegistry.get(CISPO), batch, config, rollout=True)
    tis = "trainer.algorithm.off_policy_correction.tis_ratio_type"
    assert str(error.value) == (
        f"gmpo_plugins: {ANCHOR}='rollout' with {tis}=token is not supported by policy_loss_type={CISPO}: the "
        "ratio against the rollout log-probs is already the off-policy correction, and TIS would apply it "
        f"twice (SkyRL's own cispo refuses it too). Set {tis}=null"
    )
    with pytest.raises(ValueError, match=r"TIS \(tis_ratio_type='token'\) would double-count it"):
        skyrl_step(PolicyLossRegistry.get("cispo"), batch, config, rollout=True)


@NEEDS_ANCHOR
def test_skyrls_other_losses_ignore_the_anchor(registered):
    """Why the registry's other losses refuse cispo_anchor="rollout": SkyRL's own regular loss
    gives the same numbers under either anchor (only its cispo reads the field)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    batch = make_batch(spread=0.8)
    results = []
    for anchor in ("old", "rollout"):
        config = algorithm_config("regular", "token_mean")
        config.cispo.cispo_anchor = anchor
        results.append(skyrl_step(PolicyLossRegistry.get("regular"), batch, config, rollout=True))
    (old, old_grad), (rollout, rollout_grad) = results
    assert old == rollout and torch.equal(old_grad, rollout_grad)


def test_the_compatibility_row_holds_what_the_installed_wheel_declares():
    """``upstream.TESTED_RELEASES``' row for this skyrl: its Requires-Python and transformers
    requirement as the wheel's metadata gives them."""
    from gmpo_plugins.adapters.compatibility import row_for

    row = row_for("skyrl", VERSION)
    assert row is not None and row.version == VERSION
    metadata = importlib.metadata.metadata("skyrl")
    assert Spec.parse(metadata["Requires-Python"]) == Spec.parse(row.python)
    (transformers,) = [req for req in metadata.get_all("Requires-Dist") if req.startswith("transformers")]
    assert Spec.parse(transformers.removeprefix("transformers")) == Spec.parse(row.transformers)


def test_doctor_prints_the_compatibility_row(registered, capsys):
    from gmpo_plugins.cli import main

    main(["doctor"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("  SkyRL     release:"))
    assert row.startswith(f"  SkyRL     release: {VERSION}; tested: call site")
    assert "; torch (tested): 2.13.0; extra: `[skyrl]` (skyrl>=0.3.0,<0.5);" in row
