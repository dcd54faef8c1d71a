"""The framework settings that feed the newer losses' hyper-parameters, checked the same way
in every framework's session: for each such row of an adapter's ``Field`` table, the first
registry loss it feeds is called through the framework (its compare backend, which sets the
field and goes through the framework's own call site) at a value that is neither the
framework's default nor the loss's, and must equal the core at that value and differ from
the core at the loss's default."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss, list_losses
from gmpo_plugins.adapters.hparam_sources import Field
from gmpo_plugins.compare.backends.base import PolicyLossCall
from gmpo_plugins.compare.parity.harness import parity_cases
from gmpo_plugins.core.terms import TERM_DEFAULTS

FIRST_ROWS = {"eps_low", "eps_high", "dual_clip", "reduction", "norm_length", "kl_beta"}
"""The hyper-parameters the tables fed before the newer losses."""

VALUES: dict[str, Any] = {  # neither a framework's default nor a loss's
    "tau_pos": 1.5,
    "tau_neg": 2.5,
    "delta_low": 0.1,
    "delta_high": 0.1,
    "ratio_cap": 1.2,
    "dro_beta": 0.5,
    "clip_cov_ratio": 0.5,
    "clip_cov_lb": -0.5,
    "clip_cov_ub": 1e-3,
    "kl_cov_ratio": 0.5,
    "ppo_kl_coef": 0.5,
    "vespo_k_pos": 1.0,
    "vespo_lambda_pos": 1.5,
    "vespo_k_neg": 1.5,
    "vespo_lambda_neg": 1.0,
    "eps_high": 0.5,
    "eps_low": 0.5,
}


COMPANIONS: dict[str, dict[str, Any]] = {  # set with the row so that it acts (in the baseline too)
    "clip_cov_lb": {"clip_cov_ratio": 0.5},  # the default 2e-4 of 21 tokens selects one at most
    "clip_cov_ub": {"clip_cov_ratio": 0.5, "clip_cov_lb": -0.5},  # a band below the default lb 1.0
}


def new_rows(fields: Sequence[Field]) -> list[tuple[Field, str]]:
    """(row, the first registry loss it feeds) for each row added for the newer losses (a new
    hyper-parameter, or a row for some newer losses only, e.g. a one-sided cap) that is the first row
    of its hyper-parameter for that loss (fallback rows such as verl's ``clip_ratio`` are not
    what a config sets)."""
    rows = []
    for row in fields:
        if row.hparam in TERM_DEFAULTS:
            continue  # the loss terms read inputs a compare backend does not carry: the session's term tests
        if row.hparam == "reduction" or (
            row.hparam in FIRST_ROWS and (row.applies is None or row.feeds(get_loss("grpo")))
        ):
            continue  # a reduction row is checked by the session's loss-equality test per reduction
        spec = next((spec for spec in list_losses() if row.feeds(spec)), None)
        if spec is not None and next(r for r in fields if r.hparam == row.hparam and r.feeds(spec)) is row:
            rows.append((row, spec.name))
    return rows


def row_id(item: tuple[Field, str]) -> str:
    return f"{item[0].name}->{item[1]}"


def _core(loss_name: str, case: Any, hparams: dict[str, Any]) -> tuple[float, torch.Tensor]:
    log_probs = case.log_probs.clone().requires_grad_(True)
    rows = case.mask.shape[0]
    inputs = LossInputs(log_probs, case.old_log_probs, case.advantages, case.mask)
    out = get_loss(loss_name)(
        inputs, BatchInfo(global_batch_size=rows, global_num_tokens=int(case.mask.sum())), **hparams
    )
    out.loss.backward()
    return float(out.loss.detach()), log_probs.grad.double()


def _through(backend: Any, loss_name: str, case: Any, hparams: dict[str, Any]) -> tuple[float, torch.Tensor]:
    log_probs = case.log_probs.clone().requires_grad_(True)
    rows = case.mask.shape[0]
    loss, _ = backend.policy_loss(
        PolicyLossCall(
            log_probs=log_probs,
            old_log_probs=case.old_log_probs,
            advantages=case.advantages,
            mask=case.mask,
            loss_name=loss_name,
            hparams=hparams,
            batch_info=BatchInfo(dp_size=1, global_batch_size=rows, global_num_tokens=int(case.mask.sum())),
        )
    )
    loss.backward()
    return float(loss.detach()), log_probs.grad.double()


def check_row_reaches_the_loss(backend: Any, row: Field, loss_name: str) -> None:
    """The framework at ``VALUES[row.hparam]`` equals the core there, and the core there differs
    from the core at the loss's default on at least one parity case (module docstring)."""
    spec = get_loss(loss_name)
    value = VALUES[row.hparam]
    assert value != row.default and value != spec.defaults[row.hparam]
    companions = COMPANIONS.get(row.hparam, {})
    hparams = spec.resolve({**companions, row.hparam: value})
    changed = False
    for case in parity_cases():
        if case.rollout_is_weights is not None or case.name == "bf16":
            continue
        want, want_grad = _core(loss_name, case, hparams)
        got, grad = _through(backend, loss_name, case, hparams)
        assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (case.name, got, want)
        assert float((grad - want_grad).abs().max()) <= 1e-5 * max(1.0, float(want_grad.abs().max())), case.name
        default, default_grad = _core(loss_name, case, spec.resolve(companions))
        changed |= abs(default - want) > 1e-6 or float((default_grad - want_grad).abs().max()) > 1e-6
    assert changed, f"{row.name}={value} did not change {loss_name} on any parity case"
