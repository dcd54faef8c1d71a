"""The SkyRL release table (``adapters/skyrl/releases.py``): the installed release's row holds
SkyRL's own defaults, each row's CISPO band translates into the registry's cispo (checked
against SkyRL's own cispo through its ``PolicyLossRegistry``), and ``cispo_anchor`` other than
"old" is refused by name."""

from __future__ import annotations

import importlib.metadata
from types import SimpleNamespace

import pytest
import torch

from gmpo_plugins import get_loss
from gmpo_plugins.adapters.compatibility import Spec
from gmpo_plugins.adapters.skyrl import SkyRLConfigError, options
from gmpo_plugins.adapters.skyrl.options import resolution_from_config
from gmpo_plugins.adapters.skyrl.releases import RELEASES, installed, release_for

from .helpers import algorithm_config, make_batch

VERSION = importlib.metadata.version("skyrl")
CISPO = "gmpo_plugins.cispo"


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


@pytest.mark.parametrize("anchor", ["rollout", "behaviour"])
def test_a_cispo_anchor_other_than_old_is_refused_by_name(anchor):
    with pytest.raises(SkyRLConfigError) as error:
        resolution_from_config(get_loss("cispo"), _cispo_config(1.0, 4.0, anchor), CISPO)
    message = str(error.value)
    assert message.startswith(
        f"gmpo_plugins: trainer.algorithm.cispo.cispo_anchor={anchor!r} is not supported by "
        f"policy_loss_type={CISPO}: the registry's losses take the ratio against the old log-probs"
    )
    assert "Set trainer.algorithm.cispo.cispo_anchor='old'" in message


def test_cispo_anchor_is_read_for_the_cispo_sub_config_only():
    """SkyRL's cispo_anchor applies to its cispo; gmpo ignores the cispo sub-config there and here."""
    config = _cispo_config(1.0, 4.0, "rollout")
    config.loss_reduction = "sequence_mean"
    config.eps_clip_low = config.eps_clip_high = 0.4
    assert resolution_from_config(get_loss("gmpo"), config, "gmpo").params()["eps_low"] == 0.4
    assert resolution_from_config(get_loss("cispo"), _cispo_config(1.0, 4.0, "old"), CISPO).params()["eps_high"] == 4.0


@pytest.mark.parametrize("low", ["default", 0.3, 1.0])
def test_registry_cispo_matches_skyrls_own_where_the_band_is_expressible(registered, low):
    """Through SkyRL's PolicyLossRegistry with SkyRL's token_mean scaling, float64: the adapter's
    cispo gives SkyRL's own cispo's loss and gradient (within 1e-7: SkyRL's safe_exp_delta rounds
    the ratio to float32) whenever SkyRL's lower bound is inside (0, 1) or at/below 0; at 0.3's
    default low 0.0 (a bound at 1 that lifts every ratio below 1) they differ, by the adapter's
    reading of that default as no lower clip."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    row = installed()
    low = row.cispo_eps_clip_low if low == "default" else low
    config = algorithm_config("cispo", "token_mean")
    config.cispo.cispo_eps_clip_low = low
    batch = make_batch(spread=0.8)
    mask = batch["loss_mask"]
    scaled = batch["advantages"] / mask.sum()
    results = []
    for name in (CISPO, "cispo"):
        log_probs = batch["log_probs"].clone().requires_grad_(True)
        loss, _ = PolicyLossRegistry.get(name)(
            log_probs, batch["old_log_probs"], scaled, config=config, loss_mask=mask, rollout_logprobs=None
        )
        loss.backward()
        results.append((loss.detach(), log_probs.grad))
    (ours, our_grad), (theirs, their_grad) = results
    below_one = bool(((batch["log_probs"] - batch["old_log_probs"]).exp() < 1)[mask != 0].any())
    assert below_one  # the batch reaches the lower side, so a clamp at 1 would show
    same = torch.allclose(ours, theirs, rtol=0, atol=1e-7) and torch.allclose(our_grad, their_grad, rtol=0, atol=1e-7)
    assert same is (low != 0.0), (float(ours), float(theirs))


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
