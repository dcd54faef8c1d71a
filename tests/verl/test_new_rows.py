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
from .releases import RELEASE

ROWS = new_rows(VERL_FIELDS)


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(hparam_sources, "_announced", set())
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)


def test_every_new_hyper_parameter_verl_has_a_row():
    """verl 0.8 has no policy_loss.dro_beta: no row there (``test_dro_without_verls_dro_beta``)."""
    assert {row.hparam for row, _ in ROWS} == {
        *("delta_low", "delta_high", "ratio_cap", "tau_pos", "tau_neg"),
        *("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef"),
    } | ({"dro_beta"} if RELEASE.dro_beta else set())


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


@pytest.mark.skipif(RELEASE.dro_beta, reason="verl 0.9 has policy_loss.dro_beta: its row is tested above")
def test_dro_without_verls_dro_beta(monkeypatch):
    """verl 0.8 ships no dro and no policy_loss.dro_beta: bare ``dro`` is the registry's loss, whose
    dro_beta comes from GMPO_PLUGINS_LOSS_HPARAMS or its own default 0.1, and the provenance line says
    which. One token, A = 1, log pi = -1, log pi_old = -1.5 (d = 0.5): loss = -(A log pi - beta/2 d^2) =
    1 + beta / 8, gradient d loss / d log pi = -A + beta d = -1 + beta / 2."""
    import torch
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from gmpo_plugins.adapters.verl import is_ours

    fn = get_policy_loss_fn("dro")
    assert is_ours(fn) and fn.__gmpo_plugins_loss__ == "dro"
    config = VerlBackend()._config("dro", {"loss_agg_mode": "token-mean"})
    config.global_batch_info.update(dp_size=1, global_batch_size=1, batch_num_tokens=1, loss_scale_factor=None)
    spec = get_loss("dro")
    for override, beta, source in ((None, 0.1, "loss default"), ('{"dro_beta": 0.4}', 0.4, f"override {OVERRIDE_ENV}")):
        if override is not None:
            monkeypatch.setenv(OVERRIDE_ENV, override)
        line = resolution_from_config(spec, config, "token-mean", "dro").line()
        assert f"dro_beta={beta} ({source})" in line, line
        log_prob = torch.tensor([[-1.0]], dtype=torch.float64, requires_grad=True)
        loss, _ = fn(
            old_log_prob=torch.tensor([[-1.5]], dtype=torch.float64),
            log_prob=log_prob,
            advantages=torch.ones(1, 1, dtype=torch.float64),
            response_mask=torch.ones(1, 1, dtype=torch.bool),
            loss_agg_mode="token-mean",
            config=config,
            rollout_is_weights=None,
        )
        (grad,) = torch.autograd.grad(loss, log_prob)
        assert float(loss.detach()) == pytest.approx(1 + beta / 8, abs=1e-12)
        assert float(grad) == pytest.approx(-1 + beta / 2, abs=1e-12)
