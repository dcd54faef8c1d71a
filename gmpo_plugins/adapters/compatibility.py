"""The compatibility table of docs/install.md, rendered from ``upstream`` (no framework import).

One row per release the test suite runs (``upstream.TESTED_RELEASES``): the framework, the
release and how it is tested (call site: the adapter tests, parity and the audit; end to end:
the framework's own trainer), the Python it declares and the one the tests use, its
transformers requirement, the torch the tests use, its extra, and the other tested releases
whose Python and transformers requirements intersect its own (``Spec.meets``): the pins that
keep the framework extras apart, so only such releases can share one environment.

    python -m gmpo_plugins.adapters.compatibility      prints the table (``table``)

``gmpo-plugins doctor`` prints the row of each installed framework (``row_for``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gmpo_plugins.adapters.upstream import (
    TESTED,
    TESTED_PYTHON,
    TESTED_RELEASES,
    TESTED_TORCH,
    Release,
    release_numbers,
)

_CLAUSE = re.compile(r"^\s*(==|!=|<=|>=|<|>)\s*([0-9][0-9.]*)\s*$")


@dataclass(frozen=True)
class Spec:
    """A version requirement as an interval of release numbers, with excluded versions.

    ``lower``/``upper`` are None when unbounded; ``*_closed`` says whether the bound itself
    is allowed; ``excluded`` holds the ``!=`` versions.
    """

    lower: tuple[int, ...] | None = None
    lower_closed: bool = True
    upper: tuple[int, ...] | None = None
    upper_closed: bool = True
    excluded: frozenset[tuple[int, ...]] = frozenset()

    @classmethod
    def parse(cls, text: str) -> Spec:
        """``">=5.5.3,<5.11,!=5.6.0"`` (comma-separated clauses; "" allows every version)."""
        spec = cls()
        for clause in filter(None, (part.strip() for part in text.split(","))):
            match = _CLAUSE.match(clause)
            if match is None:
                raise ValueError(f"gmpo_plugins: cannot read the version clause {clause!r} of {text!r}")
            op, version = match.group(1), release_numbers(match.group(2))
            if op == "!=":
                spec = replace(spec, excluded=spec.excluded | {version})
            if op in ("==", ">=", ">"):
                spec = spec.bounded_below(version, closed=op != ">")
            if op in ("==", "<=", "<"):
                spec = spec.bounded_above(version, closed=op != "<")
        return spec

    def bounded_below(self, version: tuple[int, ...], closed: bool) -> Spec:
        """This spec with the lower bound ``version`` as well (the tighter one kept)."""
        if self.lower is not None and (self.lower, not self.lower_closed) >= (version, not closed):
            return self
        return Spec(version, closed, self.upper, self.upper_closed, self.excluded)

    def bounded_above(self, version: tuple[int, ...], closed: bool) -> Spec:
        """This spec with the upper bound ``version`` as well (the tighter one kept)."""
        if self.upper is not None and (self.upper, self.upper_closed) <= (version, closed):
            return self
        return Spec(self.lower, self.lower_closed, version, closed, self.excluded)

    def meets(self, other: Spec) -> bool:
        """Whether some version satisfies both (versions taken as a continuum between bounds)."""
        both = Spec(self.lower, self.lower_closed, self.upper, self.upper_closed, self.excluded | other.excluded)
        if other.lower is not None:
            both = both.bounded_below(other.lower, other.lower_closed)
        if other.upper is not None:
            both = both.bounded_above(other.upper, other.upper_closed)
        if both.lower is None or both.upper is None or both.lower < both.upper:
            return True
        return both.lower == both.upper and both.lower_closed and both.upper_closed and both.lower not in both.excluded


def shares_environment(first: Release, second: Release) -> bool:
    """Whether two releases' Python and transformers requirements intersect."""
    python = Spec.parse(first.python).meets(Spec.parse(second.python))
    return python and Spec.parse(first.transformers).meets(Spec.parse(second.transformers))


def _label(release: Release) -> str:
    return f"{release.framework} {release.version}"


def columns(release: Release) -> dict[str, str]:
    """The table's cells for ``release`` (column title -> text)."""
    others = [
        _label(other)
        for other in TESTED_RELEASES
        if other.distribution != release.distribution and shares_environment(release, other)
    ]
    tested = "call site, end to end" if release.end_to_end else "call site"
    extra = f"`[{release.distribution}]` ({release.distribution}{TESTED[release.distribution].specifier})"
    return {
        "framework": release.framework,
        "release": release.version,
        "tested": tested,
        "Python (declared; tested)": f"{release.python}; {TESTED_PYTHON}",
        "transformers (declared)": release.transformers or "any",
        "torch (tested)": TESTED_TORCH,
        "extra": extra,
        "Python and transformers shared with": ", ".join(others) or "none",
    }


def table() -> str:
    """The compatibility table as Markdown (docs/install.md shows it)."""
    rows = [columns(release) for release in TESTED_RELEASES]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row.values()) + " |" for row in rows]
    return "\n".join(lines)


def row_for(distribution: str, version: str) -> Release | None:
    """The tested release that applies to ``version`` of ``distribution``: the newest tested
    release at or below it within the tested range, None outside the range."""
    if distribution not in TESTED or not TESTED[distribution].contains(version):
        return None
    rows = [
        release
        for release in TESTED_RELEASES
        if release.distribution == distribution and release_numbers(release.version) <= release_numbers(version)
    ]
    return max(rows, key=lambda release: release_numbers(release.version), default=None)


if __name__ == "__main__":
    print(table())
