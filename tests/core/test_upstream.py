"""The tested framework ranges: one source (adapters/upstream.py) that pyproject.toml's extras
agree with, and the once-per-process warning outside them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gmpo_plugins.adapters import upstream
from gmpo_plugins.adapters.upstream import TESTED, UntestedFrameworkWarning, warn_if_untested

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
NOXFILE_PINS = [
    ("verl", "0.9.1"),
    ("verl", "0.8.0"),
    ("openrlhf", "0.11.2"),
    ("trl", "1.16.0"),
    ("trl", "1.14.2"),
    ("skyrl", "0.3.0"),
]


def test_pyproject_extras_are_bounded_by_the_tested_ranges():
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    for distribution, tested in TESTED.items():
        (requirement,) = [req for req in extras[distribution] if req.startswith(distribution)]
        assert requirement == f"{distribution}{tested.specifier}", distribution


def test_the_noxfile_pins_are_inside_the_ranges():
    noxfile = (PYPROJECT.parent / "noxfile.py").read_text()
    for distribution, pin in NOXFILE_PINS:
        assert f"{distribution}=={pin}" in noxfile
        assert TESTED[distribution].contains(pin)


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        *(("1.16.0", True), ("1.16.9", True), ("1.15.2", True), ("1.14.2", True)),
        *(("1.17.0rc1", False), ("1.17", False), ("1.13.9", False), ("2.0", False)),
    ],
)
def test_range_membership_by_release_numbers(version, inside):
    assert TESTED["trl"].contains(version) is inside


def test_outside_the_range_warns_once_naming_the_range(monkeypatch):
    monkeypatch.setattr(upstream, "_warned", set())
    with pytest.warns(UntestedFrameworkWarning) as record:
        warn_if_untested("trl", "1.17.0")
        warn_if_untested("trl", "1.18.0")
    (warning,) = record
    assert str(warning.message).startswith(
        "gmpo_plugins: trl 1.17.0 is outside the range its adapter was tested with (trl>=1.14.2,<1.17)"
    )


def test_inside_the_range_is_silent(monkeypatch, recwarn):
    monkeypatch.setattr(upstream, "_warned", set())
    warn_if_untested("verl", "0.9.1")
    warn_if_untested("skyrl", "0.3.0")
    warn_if_untested("openrlhf", "0.11.2")
    assert not recwarn.list
