"""Check the built sdist and wheel of gmpo-plugins against the checkout (run by ``nox -s dist``).

    python tests/packaging/check_artefacts.py DIST_DIR [--build-log FILE]

DIST_DIR holds exactly one ``*.whl`` and one ``*.tar.gz`` from ``python -m build``, which
builds the wheel from the unpacked sdist: a wheel with every package file of the checkout
shows that the sdist holds what a rebuild needs. Checks:

- wheel: only ``gmpo_plugins/`` and its ``.dist-info``; exactly the package files of the
  checkout (``py.typed`` included), so no tests, stand-ins or examples; the LICENSE;
  core metadata 2.4 with ``License-Expression: Apache-2.0`` and no deprecated licence
  fields; the entry points declared in pyproject.toml;
- sdist: pyproject.toml, README.md, LICENSE, the package, CHANGELOG.md, CITATION.cff;
  no tests, stand-ins or examples;
- one version: ``gmpo_plugins.__version__`` = wheel and sdist version = CITATION.cff
  ``version`` = the newest release in CHANGELOG.md;
- every extra named in README.md or docs/ (``gmpo-plugins[...]``, ``.[...]``) is declared,
  and the extras table of docs/install.md lists exactly the declared extras;
- with ``--build-log``: the build printed no deprecation and no Python warning.

Prints the wheel's entry points; exits 1 with one line per failed check.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import email.parser
import re
import sys
import tarfile
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "gmpo_plugins"
# files of the checkout that never belong in an artefact
IGNORED_PARTS = {"__pycache__"}
IGNORED_SUFFIXES = {".pyc", ".pyo"}
# a path containing one of these parts is test code, a stand-in or an example
FORBIDDEN_PARTS = {"tests", "test", "shims", "examples", "example_plugin", "conftest.py"}
SDIST_REQUIRED = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "CITATION.cff", "PKG-INFO")
# a deprecation, or a Python warning category (SetuptoolsDeprecationWarning, UserWarning, ...)
BUILD_WARNING = re.compile(r"(?i:deprecat)|[A-Z]\w*Warning\b")
EXTRA_MENTION = re.compile(r"(?:gmpo-plugins|\.)\[([A-Za-z0-9_,\- ]+)\]")
EXTRAS_TABLE_ROW = re.compile(r"^\| `([a-z0-9_-]+)` \|", re.MULTILINE)


def checkout_version() -> str:
    """``__version__`` from gmpo_plugins/__init__.py, read without importing the package."""
    tree = ast.parse((REPO / PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"no __version__ in {PACKAGE}/__init__.py")


def checkout_package_files() -> set[str]:
    """Paths (relative to the repository) of the package's files in the checkout."""
    files = set()
    for path in (REPO / PACKAGE).rglob("*"):
        if path.is_file() and not IGNORED_PARTS & set(path.parts) and path.suffix not in IGNORED_SUFFIXES:
            files.add(path.relative_to(REPO).as_posix())
    return files


def declared_entry_points(pyproject: dict) -> dict[str, dict[str, str]]:
    """Entry-point groups as pyproject.toml declares them (console scripts included)."""
    project = pyproject["project"]
    groups = {group: dict(points) for group, points in project.get("entry-points", {}).items()}
    if "scripts" in project:
        groups["console_scripts"] = dict(project["scripts"])
    return groups


def wheel_entry_points(text: str) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # keep the case of names
    parser.read_string(text)
    return {group: {name: value.strip() for name, value in parser[group].items()} for group in parser.sections()}


def forbidden(path: str) -> bool:
    parts = path.split("/")
    return bool(FORBIDDEN_PARTS & set(parts)) or parts[-1].startswith("test_")


class Checks:
    """Collects failures so that one run reports all of them."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def expect(self, condition: bool, message: str) -> None:
        if not condition:
            self.failures.append(message)


def check_wheel(checks: Checks, wheel: Path, version: str, pyproject: dict) -> dict[str, dict[str, str]]:
    dist_info = f"{PACKAGE}-{version}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = email.parser.Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
        entry_points = wheel_entry_points(archive.read(f"{dist_info}/entry_points.txt").decode())
        licence = f"{dist_info}/licenses/LICENSE"
        licence_text = archive.read(licence) if licence in names else b""

    tops = {name.split("/")[0] for name in names}
    checks.expect(tops == {PACKAGE, dist_info}, f"wheel: unexpected top-level entries {sorted(tops)}")
    bad = sorted(name for name in names if forbidden(name))
    checks.expect(not bad, f"wheel: tests, stand-ins or examples inside: {bad}")
    package_files = {name for name in names if name.startswith(f"{PACKAGE}/")}
    expected = checkout_package_files()
    checks.expect(not expected - package_files, f"wheel: package files missing: {sorted(expected - package_files)}")
    checks.expect(not package_files - expected, f"wheel: files not in the checkout: {sorted(package_files - expected)}")
    checks.expect(f"{PACKAGE}/py.typed" in names, "wheel: gmpo_plugins/py.typed missing")
    checks.expect(
        licence_text == (REPO / "LICENSE").read_bytes(), "wheel: .dist-info/licenses/LICENSE missing or stale"
    )

    checks.expect(metadata["Version"] == version, f"wheel: Version {metadata['Version']} != __version__ {version}")
    metadata_version = tuple(int(part) for part in metadata["Metadata-Version"].split("."))
    checks.expect(metadata_version >= (2, 4), f"wheel: Metadata-Version {metadata['Metadata-Version']} < 2.4")
    checks.expect(
        metadata["License-Expression"] == pyproject["project"]["license"],
        f"wheel: License-Expression {metadata['License-Expression']!r}",
    )
    checks.expect(metadata.get_all("License-File") == ["LICENSE"], "wheel: License-File is not LICENSE")
    checks.expect(metadata["License"] is None, "wheel: deprecated License field present")
    licence_classifiers = [c for c in metadata.get_all("Classifier") or [] if c.startswith("License ::")]
    checks.expect(
        not licence_classifiers, f"wheel: licence classifiers beside the SPDX expression: {licence_classifiers}"
    )
    checks.expect(bool(metadata.get_all("Project-URL")), "wheel: no Project-URL")
    declared_extras = set(pyproject["project"]["optional-dependencies"])
    checks.expect(set(metadata.get_all("Provides-Extra") or []) == declared_extras, "wheel: Provides-Extra differs")

    declared = declared_entry_points(pyproject)
    checks.expect(entry_points == declared, f"wheel: entry points {entry_points} != pyproject.toml {declared}")
    for group in entry_points.values():
        for target in group.values():
            module = target.split(":")[0].replace(".", "/")
            present = f"{module}.py" in names or f"{module}/__init__.py" in names
            checks.expect(present, f"wheel: entry point target {target} not in the wheel")
    return entry_points


def check_sdist(checks: Checks, sdist: Path, version: str) -> None:
    root = f"{PACKAGE}-{version}"
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(f"{root}/") for name in archive.getnames()}
    for required in SDIST_REQUIRED:
        checks.expect(required in names, f"sdist: {required} missing")
    missing = sorted(checkout_package_files() - names)
    checks.expect(not missing, f"sdist: package files missing: {missing}")
    bad = sorted(name for name in names if forbidden(name))
    checks.expect(not bad, f"sdist: tests, stand-ins or examples inside: {bad}")


def check_versions(checks: Checks, version: str) -> None:
    citation = re.search(r"^version:\s*['\"]?([^'\"\s]+)", (REPO / "CITATION.cff").read_text(), re.MULTILINE)
    checks.expect(
        citation is not None and citation.group(1) == version,
        f"CITATION.cff version {citation and citation.group(1)} != {version}",
    )
    releases = re.findall(r"^## \[([^\]]+)\]", (REPO / "CHANGELOG.md").read_text(), re.MULTILINE)
    newest = next((release for release in releases if release.lower() != "unreleased"), None)
    checks.expect(newest == version, f"CHANGELOG.md newest release {newest} != {version}")


def extras_table(page: str) -> str:
    """The Markdown table whose header starts with ``| extra |``."""
    lines = page.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| extra |")), len(lines))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def check_documented_extras(checks: Checks, pyproject: dict) -> None:
    declared = set(pyproject["project"]["optional-dependencies"])
    tabled = set(EXTRAS_TABLE_ROW.findall(extras_table((REPO / "docs" / "install.md").read_text())))
    checks.expect(tabled == declared, f"docs/install.md: extras table {sorted(tabled)} != declared {sorted(declared)}")
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for match in EXTRA_MENTION.finditer(page.read_text()):
            for extra in (name.strip() for name in match.group(1).split(",")):
                checks.expect(extra in declared, f"{page.relative_to(REPO)}: extra {extra!r} is not declared")


def check_build_log(checks: Checks, log: Path) -> None:
    lines = [line for line in log.read_text().splitlines() if BUILD_WARNING.search(line)]
    checks.expect(not lines, "python -m build printed warnings:\n  " + "\n  ".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist_dir", type=Path)
    parser.add_argument("--build-log", type=Path, help="output of python -m build, checked for warnings")
    args = parser.parse_args()

    wheels, sdists = sorted(args.dist_dir.glob("*.whl")), sorted(args.dist_dir.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist in {args.dist_dir}, found {wheels + sdists}", file=sys.stderr)
        return 1
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    version = checkout_version()
    checks = Checks()
    entry_points = check_wheel(checks, wheels[0], version, pyproject)
    check_sdist(checks, sdists[0], version)
    check_versions(checks, version)
    check_documented_extras(checks, pyproject)
    if args.build_log:
        check_build_log(checks, args.build_log)

    print(f"{wheels[0].name}: entry points", flush=True)
    for group, points in sorted(entry_points.items()):
        for name, target in sorted(points.items()):
            print(f"  [{group}] {name} = {target}")
    if checks.failures:
        sys.stdout.flush()
        print("\n".join(f"FAIL {failure}" for failure in checks.failures), file=sys.stderr)
        return 1
    print(f"ok: wheel and sdist of gmpo-plugins {version} (contents, metadata, entry points, versions, extras)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
