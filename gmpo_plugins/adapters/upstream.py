"""The framework versions each adapter was tested with, and what happens outside them.

``TESTED`` holds, per framework distribution, the range the test suite runs against (the
noxfile's pins) as ``>=lower,<upper``; ``pyproject.toml``'s extras use the same bounds
(``tests/core/test_upstream.py`` reads both). ``TESTED_RELEASES`` lists the releases inside it that the
tests run, with their declared Python and transformers (the compatibility table,
``compatibility``). Outside the range:

    version only    the adapter runs and gives one ``UntestedFrameworkWarning`` per process
                    naming the tested range (``warn_if_untested``)
    changed code    an upstream change the adapter detects that would bypass or rescale the
                    loss (a call path routed around it, a normalisation moved, a missing
                    count, another signature) raises ``UpstreamDriftError``, in or out of
                    the range

Versions are compared by their release numbers (``1.17.0rc1`` counts as 1.17.0). No
framework is imported here.
"""

from __future__ import annotations

import importlib.metadata
import re
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class TestedRange:
    """``distribution>=lower,<upper``: the versions an adapter's tests ran against."""

    distribution: str
    lower: str
    upper: str

    @property
    def specifier(self) -> str:
        """The requirement specifier, as pyproject.toml's extra writes it."""
        return f">={self.lower},<{self.upper}"

    def contains(self, version: str) -> bool:
        """Whether ``version`` is inside the range (release numbers compared)."""
        return release_numbers(self.lower) <= release_numbers(version) < release_numbers(self.upper)


TESTED = {
    "verl": TestedRange("verl", "0.8.0", "0.10"),
    "openrlhf": TestedRange("openrlhf", "0.11.2", "0.12"),
    "trl": TestedRange("trl", "1.14.2", "1.17"),
    "skyrl": TestedRange("skyrl", "0.3.0", "0.5"),
}
"""Framework distribution -> the range its adapter is tested with."""

TESTED_TORCH = "2.13.0"
TESTED_PYTHON = "3.11"


@dataclass(frozen=True)
class Release:
    """One framework release the test suite runs, with what it declares (its wheel's metadata).

    framework      the framework's name in the docs, ``distribution`` its package
    version        the release the noxfile pins
    end_to_end     whether the framework's own trainer runs end to end (an ``_e2e`` session),
                   beside the call-site tests (adapter tests, parity, audit) every row has
    python         the release's ``Requires-Python``
    transformers   the release's ``transformers`` requirement ("" when it names none)
    """

    framework: str
    distribution: str
    version: str
    end_to_end: bool
    python: str
    transformers: str


TESTED_RELEASES = (
    Release("verl", "verl", "0.9.1", True, ">=3.10,<3.13", ">=5.5.3,<5.11,!=5.6.0"),
    Release("verl", "verl", "0.8.0", False, ">=3.10", ""),
    Release("OpenRLHF", "openrlhf", "0.11.2", True, ">=3.10", "==5.15.0"),
    Release("TRL", "trl", "1.16.0", True, ">=3.11", ">=4.56.2"),
    Release("TRL", "trl", "1.14.2", False, ">=3.10", ">=4.56.2"),
    Release("SkyRL", "skyrl", "0.3.0", False, ">=3.11", ">=5.6.1,<=5.8.0"),
    Release("SkyRL", "skyrl", "0.4.0", True, ">=3.12,<3.15", ">=5.6.1,<=5.16.1"),
)
"""Every release the test suite runs (``compatibility`` renders them as the table of
docs/install.md); each lies in its framework's ``TESTED`` range."""


class UntestedFrameworkWarning(UserWarning):
    """The installed framework's version is outside the range its adapter was tested with."""


class UpstreamDriftError(RuntimeError):
    """The installed framework no longer calls or scales the loss the way the adapter relies on."""


_warned: set[str] = set()


def release_numbers(version: str) -> tuple[int, ...]:
    """``version``'s release numbers, trailing zeros dropped: ``0.4.0rc1`` -> (0, 4)."""
    match = re.match(r"\d+(\.\d+)*", version.strip().lstrip("v"))
    if match is None:
        raise ValueError(f"gmpo_plugins: cannot read the version {version!r}")
    numbers = [int(part) for part in match.group(0).split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def in_tested_range(distribution: str, version: str | None = None) -> bool | None:
    """Whether ``version`` (default: the installed one) of ``distribution`` is in ``TESTED``;
    None when it is not installed."""
    version = installed_version(distribution) if version is None else version
    return None if version is None else TESTED[distribution].contains(version)


def untested_message(distribution: str, version: str) -> str:
    """The text of the ``UntestedFrameworkWarning`` for ``version`` of ``distribution``."""
    tested = TESTED[distribution]
    return (
        f"gmpo_plugins: {distribution} {version} is outside the range its adapter was tested with "
        f"({distribution}{tested.specifier}); the adapter runs and still refuses the upstream changes it "
        f"detects, but its results are not covered by the tests: pip install '{distribution}{tested.specifier}' "
        "for the tested setup"
    )


def warn_if_untested(distribution: str, version: str | None = None) -> None:
    """One ``UntestedFrameworkWarning`` per process and framework when ``version`` (default:
    the installed one) of ``distribution`` is outside ``TESTED``."""
    version = installed_version(distribution) if version is None else version
    if version is None or distribution in _warned or TESTED[distribution].contains(version):
        return
    _warned.add(distribution)
    warnings.warn(untested_message(distribution, version), UntestedFrameworkWarning, stacklevel=3)


def framework_version(distribution: str) -> str:
    """``<distribution> <installed version>`` for error messages (``not installed`` if absent)."""
    return f"{distribution} {installed_version(distribution) or '(not installed)'}"
