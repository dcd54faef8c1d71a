"""Each ``SKYRL_FIELDS`` row for the newer losses reaches the loss through SkyRL's
``PolicyLossRegistry`` and advantage pre-scaling (``tests/field_rows.py``), and the
provenance line names the ``trainer.algorithm`` field; losses not linear in the advantages
are refused with the reason."""

from __future__ import annotations

import pytest

from gmpo_plugins import get_loss, list_losses
from gmpo_plugins.adapters import hparam_sources
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.inputs import missing_inputs
from gmpo_plugins.adapters.skyrl.options import SKYRL_FIELDS, SkyRLConfigError, resolution_from_config
from gmpo_plugins.compare.backends.skyrl import SkyRLBackend, algorithm_config, algorithm_fields

from ..field_rows import COMPANIONS, VALUES, check_row_reaches_the_loss, new_rows, row_id

ROWS = [(row, loss) for row, loss in new_rows(SKYRL_FIELDS) if get_loss(loss).linear_in_advantages]


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(hparam_sources, "_announced", set())
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)


def test_every_new_hyper_parameter_skyrl_has_a_row():
    assert {(row.hparam, loss) for row, loss in new_rows(SKYRL_FIELDS)} == {
        *(("eps_low", "cispo"), ("eps_high", "cispo")),
        *(("tau_pos", "sapo"), ("tau_neg", "sapo")),
        *(("delta_low", "dppo_kl"), ("delta_high", "dppo_kl")),
        *(("clip_cov_ratio", "clip_cov"), ("clip_cov_lb", "clip_cov"), ("clip_cov_ub", "clip_cov")),
        *(("kl_cov_ratio", "kl_cov"), ("ppo_kl_coef", "kl_cov")),
    }


@pytest.mark.parametrize("item", ROWS, ids=row_id)
def test_the_row_reaches_the_loss(item):
    check_row_reaches_the_loss(SkyRLBackend(), *item)


@pytest.mark.parametrize("item", ROWS, ids=row_id)
def test_the_provenance_line_names_the_field(item):
    row, loss = item
    spec = get_loss(loss)
    hparams = spec.resolve({**COMPANIONS.get(row.hparam, {}), row.hparam: VALUES[row.hparam]})
    config = algorithm_config(f"gmpo_plugins.{loss}", algorithm_fields(loss, hparams, width=8))
    line = resolution_from_config(spec, config, f"gmpo_plugins.{loss}").line()
    assert f"{row.hparam}={VALUES[row.hparam]!r} (framework field {row.name})" in line, line


@pytest.mark.parametrize(
    "loss",
    # a loss that needs an input SkyRL does not pass (real: group ids) is refused for that first
    # (tests/core/test_msswift_losses.py)
    [spec.name for spec in list_losses() if not spec.linear_in_advantages and not missing_inputs(spec, "skyrl")],
)
def test_losses_not_linear_in_the_advantages_are_refused_with_the_reason(loss):
    config = algorithm_config(f"gmpo_plugins.{loss}", {"loss_reduction": "token_mean"})
    with pytest.raises(SkyRLConfigError, match=f"{loss} is not linear in the advantages"):
        resolution_from_config(get_loss(loss), config, f"gmpo_plugins.{loss}")
