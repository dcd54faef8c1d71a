"""The compatibility table (``adapters/compatibility.py`` from ``adapters/upstream.py``): the
install page shows it, its releases are the noxfile's pins inside the tested ranges (which the
extras follow), the requirement intersection on hand-checked pairs, and the row that applies
to a version."""

from __future__ import annotations

from pathlib import Path

import pytest

from gmpo_plugins.adapters.compatibility import Spec, columns, row_for, shares_environment, table
from gmpo_plugins.adapters.upstream import TESTED, TESTED_RELEASES, release_numbers

ROOT = Path(__file__).resolve().parents[2]
BY_LABEL = {f"{release.distribution} {release.version}": release for release in TESTED_RELEASES}


def test_the_install_page_shows_the_table():
    assert table() in (ROOT / "docs" / "install.md").read_text()


def test_every_release_is_a_noxfile_pin_inside_its_tested_range():
    noxfile = (ROOT / "noxfile.py").read_text()
    for release in TESTED_RELEASES:
        assert f'"{release.distribution}=={release.version}"' in noxfile, release
        assert TESTED[release.distribution].contains(release.version), release


def test_each_tested_range_starts_at_its_oldest_tested_release_and_covers_the_newest():
    """The extras' bounds (``TESTED``, which pyproject.toml repeats) follow the table: the range
    opens at the oldest release tested and closes at the minor after the newest."""
    for distribution, tested in TESTED.items():
        versions = sorted(
            (release.version for release in TESTED_RELEASES if release.distribution == distribution),
            key=release_numbers,
        )
        assert tested.lower == versions[0], distribution
        newest = release_numbers(versions[-1])
        assert release_numbers(tested.upper) == (newest[0], newest[1] + 1), distribution


@pytest.mark.parametrize(
    ("first", "second", "meets"),
    [
        (">=5.5.3,<5.11,!=5.6.0", ">=5.6.1,<=5.8.0", True),  # verl 0.9.1 and skyrl 0.3.0: 5.6.1 to 5.8.0
        (">=5.5.3,<5.11,!=5.6.0", "==5.15.0", False),  # verl and OpenRLHF 0.11.2
        (">=5.6.1,<=5.8.0", "==5.15.0", False),  # skyrl 0.3.0 and OpenRLHF
        (">=5.6.1,<=5.16.1", "==5.15.0", True),  # skyrl 0.4.0 and OpenRLHF
        ("!=5.6.0", "==5.6.0", False),
        ("<5.11", ">=5.11", False),
        ("<=5.8.0", ">=5.8", True),  # 5.8.0 is 5.8
        ("<5.8", ">5.7.9", True),
        ("", ">=4.56.2", True),
    ],
)
def test_requirements_intersect_as_hand_checked(first, second, meets):
    assert Spec.parse(first).meets(Spec.parse(second)) is meets
    assert Spec.parse(second).meets(Spec.parse(first)) is meets


def test_an_unreadable_clause_names_itself():
    with pytest.raises(ValueError, match=r"cannot read the version clause '~=5\.6' of '>=5,~=5\.6'"):
        Spec.parse(">=5,~=5.6")


def test_the_extras_that_share_an_environment():
    """verl 0.9 and OpenRLHF never (transformers); verl 0.8, which declares no transformers bound, by
    these two requirements; skyrl 0.4 and OpenRLHF on Python >= 3.12; skyrl 0.4 and verl on Python 3.12
    only (verl declares < 3.13), which still intersects."""
    assert not shares_environment(BY_LABEL["verl 0.9.1"], BY_LABEL["openrlhf 0.11.2"])
    assert shares_environment(BY_LABEL["verl 0.8.0"], BY_LABEL["openrlhf 0.11.2"])
    assert not shares_environment(BY_LABEL["skyrl 0.3.0"], BY_LABEL["openrlhf 0.11.2"])
    assert shares_environment(BY_LABEL["skyrl 0.4.0"], BY_LABEL["openrlhf 0.11.2"])
    assert shares_environment(BY_LABEL["skyrl 0.4.0"], BY_LABEL["verl 0.9.1"])
    cells = columns(BY_LABEL["openrlhf 0.11.2"])
    assert cells["Python and transformers shared with"] == "verl 0.8.0, TRL 1.16.0, TRL 1.14.2, SkyRL 0.4.0"


@pytest.mark.parametrize(
    ("distribution", "version", "row"),
    [
        ("skyrl", "0.3.0", "0.3.0"),
        ("skyrl", "0.3.9", "0.3.0"),
        ("skyrl", "0.4.2", "0.4.0"),
        ("skyrl", "0.5.0", None),
        ("verl", "0.9.3", "0.9.1"),
        ("verl", "0.9.0", "0.8.0"),
        ("verl", "0.8.0", "0.8.0"),
        ("verl", "0.7.1", None),
        ("trl", "1.16.1", "1.16.0"),
        ("trl", "1.15.2", "1.14.2"),
        ("trl", "1.14.1", None),
    ],
)
def test_the_row_that_applies_to_a_version(distribution, version, row):
    found = row_for(distribution, version)
    assert (None if found is None else found.version) == row
