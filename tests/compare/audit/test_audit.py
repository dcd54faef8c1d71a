"""The audit's verdicts, translations and report, with a stand-in framework
(``fake_framework``) so that they run without any framework installed."""

from __future__ import annotations

import json

import pytest

from gmpo_plugins.compare.audit import report, translations
from gmpo_plugins.compare.audit.batches import audit_cases
from gmpo_plugins.compare.audit.callers import FRAMEWORKS, Caller
from gmpo_plugins.compare.audit.translations import CannotExpress, Reference
from gmpo_plugins.compare.audit.verdict import audit_cell

FAKE = Caller("fake", "tests.compare.audit.fake_framework", "torch", ())


@pytest.fixture
def fake(monkeypatch):
    table = {
        "grpo": Reference("plain", {"loss": "grpo"}),
        "dapo": Reference("scaled", {"loss": "dapo"}),
        "dr_grpo": Reference("plain", {"loss": "grpo"}),  # another loss: differs, nothing named
        "gspo": Reference("plain", {"loss": "gspo", "hparams": {"log_ratio_bound": 60.0}}, ("no_overflow_guard",)),
        "gmpo": Reference("plain", {"loss": "gmpo", "hparams": {"log_ratio_bound": 60.0}}, ("empty_rows_not_counted",)),
        "gmpo_noclip": CannotExpress("no way to switch the clip off"),
    }
    monkeypatch.setitem(translations.TRANSLATIONS, "fake", table)
    return FAKE


def test_every_named_convention_exists():
    translations.check_conventions()


def test_registry_loss_without_translation_is_not_shipped(fake):
    assert audit_cell(fake, "gmpo_nonorm").verdict == "not shipped"
    # a framework's caller is not even imported for it
    assert audit_cell(FRAMEWORKS["verl"], "gmpo_nonorm").verdict == "not shipped"


def test_verdicts(fake):
    cells = {loss: audit_cell(fake, loss) for loss in ("grpo", "dapo", "dr_grpo", "gspo", "gmpo", "gmpo_noclip")}
    assert cells["grpo"].verdict == "identical" and cells["grpo"].d_loss <= 1e-12
    # the loss times the micro-batches per rank: 4x at 4 micro-batches, exactly
    assert cells["dapo"].verdict == "split-dependent" and cells["dapo"].split_factor == pytest.approx(4.0, abs=1e-12)
    assert cells["dr_grpo"].verdict == "differs"
    # the guard off, named and modelled (log_ratio_bound 60): verified
    assert (cells["gspo"].verdict, cells["gspo"].verified) == ("convention", True)
    # the guard off but the wrong convention named: modelled, does not match
    assert cells["gmpo"].verdict == "differs" and "empty_rows_not_counted" in cells["gmpo"].note
    assert cells["gmpo_noclip"].verdict == "cannot express"


def test_merge_and_markdown(fake, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    cells = [audit_cell(fake, "grpo"), audit_cell(fake, "dapo")]
    document = {"command": "gmpo-plugins audit --json a.json", "frameworks": {"fake": {"torch": "x"}}}
    first.write_text(json.dumps(document | {"cells": [cells[0].as_dict()]}))
    second.write_text(json.dumps(document | {"cells": [cells[1].as_dict()]}))
    page = report.markdown(report.merge([first, second]))
    assert "| grpo | identical |" in page and "| dapo | split-dependent x4.00 |" in page
    assert "## Between releases" not in page  # one release of the framework
    assert "gmpo-plugins audit --json a.json" in page
    with pytest.raises(ValueError, match="grpo / fake"):
        report.merge([first, first])


def test_two_releases_of_a_framework_get_a_column_each(fake, tmp_path):
    """skyrl.json (0.3.0) and skyrl-0.4.json (0.4.0) hold the same (loss, framework) cells: the
    page shows one column per release, oldest first, after the frameworks listed before, and
    the verdicts that changed between them."""
    cell = audit_cell(fake, "grpo").as_dict() | {"framework": "skyrl"}
    paths = []
    for version, verdict in (("0.4.0", "identical"), ("0.3.0", "differs")):
        path = tmp_path / f"skyrl-{version}.json"
        versions = {"torch": "x", "skyrl": version}
        command = f"gmpo-plugins audit --json {path.name}"
        document = {"command": command, "frameworks": {"skyrl": versions}, "cells": [cell | {"verdict": verdict}]}
        path.write_text(json.dumps(document))
        paths.append(path)
    verl = tmp_path / "verl.json"
    cells = [cell | {"framework": "verl"}]
    verl.write_text(json.dumps({"command": "c", "frameworks": {"verl": {"verl": "0.9.1"}}, "cells": cells}))
    merged = report.merge([*paths, verl])
    assert list(merged["frameworks"]) == ["skyrl 0.4.0", "skyrl 0.3.0", "verl"]
    page = report.markdown(merged)
    assert "| loss | verl | skyrl 0.3.0 | skyrl 0.4.0 |" in page
    assert "| grpo | identical | differs | identical |" in page
    assert (
        "## Between releases\n\nskyrl 0.3.0 -> skyrl 0.4.0: the verdicts that changed:\n\n"
        "- grpo: differs -> identical\n" in page
    )


def test_batch_dependent_loss_is_compared_with_the_registry_on_the_same_micro_batches(fake, monkeypatch):
    """For a loss in PER_MICRO_BATCH the split baseline is the registry on the same split: the
    registry-through-the-stand-in stays identical, the scaled one is 4x at 4 micro-batches."""
    from gmpo_plugins.compare.audit import verdict

    monkeypatch.setattr(verdict, "PER_MICRO_BATCH", frozenset({"grpo", "dapo"}))
    assert audit_cell(fake, "grpo").verdict == "identical"
    scaled = audit_cell(fake, "dapo")
    assert scaled.verdict == "split-dependent" and scaled.split_factor == pytest.approx(4.0, abs=1e-12)


def test_uncommitted_loss_is_accepted_only_where_it_is_not_shipped(fake, monkeypatch):
    """The live-vs-committed check of the framework sessions: committed cells for every loss but
    gmpo_nonorm (not shipped by the fake framework) and dapo (shipped): gmpo_nonorm passes,
    dapo is reported, with the rule in the failure message."""
    from tests.audit_cells import NEW_LOSSES, changed_cells

    monkeypatch.setitem(FRAMEWORKS, "fake", fake)
    cells = [
        audit_cell(fake, loss).as_dict() for loss in report.registry_losses() if loss not in ("gmpo_nonorm", "dapo")
    ]
    changes = changed_cells({"frameworks": {"fake": {}}, "cells": cells})

    assert len(changes) == 1 and changes[0].startswith("dapo / fake: committed None, now {'verdict': 'split-dependent'")
    assert "'not shipped'" in NEW_LOSSES


@pytest.fixture
def fake_corrections(monkeypatch):
    from gmpo_plugins.compare.audit import corrections

    rows = corrections.CORRECTION_ROWS
    table = {
        "token TIS 2": {"options": rows["token TIS 2"]},
        "sequence mask [0.2, 5]": {"options": rows["sequence mask [0.2, 5]"], "skew": 1.001},
        "reject token_k2 0.5": {"options": rows["reject token_k2 0.5"], "count_all": True},
    }
    monkeypatch.setitem(corrections.CORRECTION_TRANSLATIONS, "fake", table)
    return FAKE


def test_correction_verdicts(fake_corrections):
    """The registry's own correction is identical and acts on some tokens; a factor 0.1% off, or
    rejected tokens left in the count, differ by exactly that; a row without a translation is not
    shipped."""
    from gmpo_plugins.compare.audit.corrections import correction_cell

    same = correction_cell(fake_corrections, "token TIS 2")
    assert same.verdict == "identical" and same.d_factor == 0.0 and same.count_differs == 0
    assert 0.05 < same.acted < 0.95
    skewed = correction_cell(fake_corrections, "sequence mask [0.2, 5]")
    assert skewed.verdict == "differs" and skewed.count_differs == 0
    assert skewed.d_factor == pytest.approx(1e-3, rel=1e-6)  # factors <= 1 here: relative to 1
    counted = correction_cell(fake_corrections, "reject token_k2 0.5")
    assert counted.verdict == "differs" and counted.d_factor == 0.0
    assert counted.count_differs == round(counted.acted * sum(int(c.mask.sum()) for c in audit_cases()))
    assert correction_cell(fake_corrections, "reject seq_max_k3 6.5").verdict == "not shipped"


def test_correction_cells_reach_the_json_and_the_page(fake_corrections, tmp_path):
    from gmpo_plugins.compare.audit.corrections import run_corrections

    cells = run_corrections([fake_corrections])
    path = tmp_path / "fake.json"
    path.write_text(json.dumps(report.document([], ["verl"], "cmd", cells)))
    merged = report.merge([path])
    assert [cell["row"] for cell in merged["corrections"]][:3] == [
        "token TIS 2",
        "sequence TIS 2",
        "token mask [0.5, 2]",
    ]
    page = report.markdown(merged)
    assert "## Rollout corrections" in page
    assert "| token TIS 2 | `rollout_is=token, rollout_is_threshold=2.0` | identical |" in page
    assert (
        "| reject token_k2 0.5 | `rollout_rs=token_k2, rollout_rs_threshold=0.5, rollout_mask_count=drop` | differs"
        in page
    )
