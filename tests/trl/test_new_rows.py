"""Each ``TRL_FIELDS`` row for the newer losses reaches the loss through
``RegistryGRPOTrainer._compute_loss`` (``tests/field_rows.py``), and the provenance line names
the GRPOConfig field; TRL's cispo cap ``epsilon_high`` is the registry's ``eps_high + 1``."""

from __future__ import annotations

import pytest
from trl import GRPOConfig

from gmpo_plugins import get_loss
from gmpo_plugins.adapters import hparam_sources
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.trl.options import TRL_FIELDS, loss_resolution
from gmpo_plugins.compare.backends.trl import TrlBackend, trl_settings

from ..field_rows import COMPANIONS, VALUES, check_row_reaches_the_loss, new_rows, row_id

ROWS = new_rows(TRL_FIELDS)


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(hparam_sources, "_announced", set())
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)


def _args(loss: str, hparams: dict) -> tuple[GRPOConfig, dict]:
    fields, extra = trl_settings(loss, get_loss(loss).resolve(hparams))
    return GRPOConfig(output_dir="unused", use_cpu=True, report_to="none", **fields), extra


def test_every_new_hyper_parameter_trl_has_a_row():
    assert {(row.hparam, loss) for row, loss in ROWS} == {
        ("eps_high", "cispo"),
        *(("tau_pos", "sapo"), ("tau_neg", "sapo")),
        *((name, "vespo") for name in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")),
    }


@pytest.mark.parametrize("item", ROWS, ids=row_id)
def test_the_row_reaches_the_loss(item):
    check_row_reaches_the_loss(TrlBackend(), *item)


@pytest.mark.parametrize("item", ROWS, ids=row_id)
def test_the_provenance_line_names_the_field(item):
    row, loss = item
    args, extra = _args(loss, {**COMPANIONS.get(row.hparam, {}), row.hparam: VALUES[row.hparam]})
    line = loss_resolution(args, get_loss(loss), extra).line()
    assert f"{row.hparam}={VALUES[row.hparam]!r} (framework field {row.name})" in line, line


def test_cispo_takes_the_cap_minus_one_and_no_lower_clip():
    args = GRPOConfig(output_dir="unused", use_cpu=True, report_to="none", epsilon_high=5.0)
    params = loss_resolution(args, get_loss("cispo")).params()
    assert params["eps_high"] == 4.0  # TRL clamps the ratio at epsilon_high = 5.0 = 1 + 4.0
    assert "eps_low" not in params  # GRPOConfig.epsilon does not feed a one-sided cap
