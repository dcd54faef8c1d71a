"""Each ``VERL_FIELDS`` row for the newer losses reaches the loss through verl's
``get_policy_loss_fn`` (``tests/field_rows.py``), and the provenance line names the field."""

from __future__ import annotations

import pytest

from gmpo_plugins import get_loss
from gmpo_plugins.adapters import hparam_sources
from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.verl.options import VERL_FIELDS, resolution_from_config
from gmpo_plugins.compare.backends.verl import VerlBackend, verl_fields

from ..field_rows import COMPANIONS, VALUES, check_row_reaches_the_loss, new_rows, row_id

ROWS = new_rows(VERL_FIELDS)


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(hparam_sources, "_announced", set())
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)


def test_every_new_hyper_parameter_verl_has_a_row():
    assert {row.hparam for row, _ in ROWS} == {
        *("delta_low", "delta_high", "ratio_cap", "tau_pos", "tau_neg", "dro_beta"),
        *("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef"),
    }


@pytest.mark.parametrize("item", ROWS, ids=row_id)
def test_the_row_reaches_the_loss(item):
    check_row_reaches_the_loss(VerlBackend(), *item)


@pytest.mark.parametrize("item", ROWS, ids=row_id)
def test_the_provenance_line_names_the_field(item):
    row, loss = item
    spec = get_loss(loss)
    mode = f"gmpo_plugins.{loss}"
    config = VerlBackend()._config(
        mode, verl_fields(loss, spec.resolve({**COMPANIONS.get(row.hparam, {}), row.hparam: VALUES[row.hparam]}))
    )
    line = resolution_from_config(spec, config, config.loss_agg_mode, mode).line()
    assert f"{row.hparam}={VALUES[row.hparam]!r} (framework field {row.name})" in line, line
