"""The package's import graph, read statically (ast, nothing imported, no framework needed):
no cycle between modules of ``gmpo_plugins``, and each layer imports only from itself and
the layers below it (core < adapters, bench < compare, frameworks < cli).

Every import counts, also one inside a function or under ``TYPE_CHECKING``: a lazy import
hides a cycle from the interpreter, not from a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "gmpo_plugins"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

# the lowest layer that may import a module of each subpackage; top-level modules (the public
# API: gmpo_plugins/__init__.py, the plugin-author module) sit just above the core
LAYERS = {"core": 0, "": 1, "adapters": 2, "bench": 2, "compare": 3, "frameworks": 3, "cli": 4}
# what the core may import besides the standard library and itself
CORE_THIRD_PARTY = {"torch", "pluggy", "triton"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imported_names(module: str, path: Path) -> set[str]:
    """Absolute names of everything ``module`` imports (relative imports resolved)."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from package import submodule` imports the submodule; any other name comes from `source`
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                names.add(submodule if submodule in MODULES else source)
    return names


def internal_edges() -> dict[str, set[str]]:
    """module -> the gmpo_plugins modules it imports (a name inside a module maps to that module)."""
    edges: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = set()
        for name in imported_names(module, path):
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                while name not in MODULES:
                    name = name.rsplit(".", 1)[0]
                if name != module:
                    targets.add(name)
        edges[module] = targets
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# the rooms of gmpo_plugins.compare and the other rooms each may import (its package docstring)
COMPARE_ROOMS = {
    "backends": set(),
    "report": set(),
    "experiment": {"backends"},
    "parity": {"backends"},
    "audit": {"backends", "parity"},
}


def compare_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "compare" else None


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1]] if len(parts) > 1 and parts[1] in LAYERS else LAYERS[""]


def test_the_graph_is_read():
    edges = internal_edges()
    assert len(MODULES) > 40
    assert "gmpo_plugins.core.registry" in edges["gmpo_plugins"]  # the public API re-exports the registry


def test_no_import_cycle_inside_the_package():
    cycle = find_cycle(internal_edges())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_find_cycle_finds_one():
    # the checker itself: a three-module ring is reported, a chain is not
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_layer_imports_only_downwards(module):
    above = sorted(target for target in internal_edges()[module] if layer(target) > layer(module))
    assert not above, f"{module} (layer {layer(module)}) imports from a higher layer: {above}"


def test_compare_has_only_its_rooms():
    rooms = {compare_room(module) for module in MODULES} - {None}
    assert rooms == set(COMPARE_ROOMS), f"compare's rooms changed: {sorted(rooms)}; update COMPARE_ROOMS"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if compare_room(m)))
def test_each_compare_room_imports_only_the_rooms_it_names(module):
    room = compare_room(module)
    others = {compare_room(target) for target in internal_edges()[module]} - {None, room}
    assert others <= COMPARE_ROOMS[room], f"{module} ({room}/) imports from {sorted(others - COMPARE_ROOMS[room])}/"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(PACKAGE + ".core")))
def test_core_imports_no_framework(module):
    import sys

    outside = {
        name.split(".")[0]
        for name in imported_names(module, MODULES[module])
        if name.split(".")[0] not in sys.stdlib_module_names | {PACKAGE, "__future__"}
    }
    assert outside <= CORE_THIRD_PARTY, f"{module} imports {sorted(outside - CORE_THIRD_PARTY)}"


def test_the_example_plugin_uses_only_the_plugin_api():
    path = ROOT.parent / "tests" / "plugins" / "example_plugin" / "gmpo_example_plugin" / "__init__.py"
    used = {name for name in imported_names("gmpo_example_plugin", path) if name.split(".")[0] == PACKAGE}
    assert used == {"gmpo_plugins.plugin"}


def test_the_plugin_api_exports_what_it_lists():
    import gmpo_plugins.plugin as api

    assert {"LossSpec", "LossInputs", "BatchInfo", "LossOutput", "LossFn", "hookimpl", "prepare"} <= set(api.__all__)
    assert all(hasattr(api, name) for name in api.__all__)
